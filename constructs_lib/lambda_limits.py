"""Lambda's limits that both the constructs (a section's stop grace) and the offline runtime
(``locked_workflow.testing.lambda_runtime``) rely on - without the CDK, so the runtime can
read them."""

from __future__ import annotations

#: Lambda's Init phase (a cold start: the runtime, the extensions, the function's module code)
#: runs before the function's timeout starts, for up to 10 s on an on-demand function; when it
#: does not complete, Lambda retries it within the invocation, under the function's timeout
#: (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html). A handler
#: invoked just before a stop may so enter its work up to this long plus its timeout after it.
LAMBDA_INIT_LIMIT_S = 10
