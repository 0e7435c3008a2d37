"""Where the ``locked-workflow`` CLI finds its lock table and how it talks to AWS: boto3's
session (an endpoint's region and dummy credentials), clients that fail fast, and the lock table
of a CloudFormation stack.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Mapping

from locked_workflow.constructs_lib.cli_commands import CliError
from locked_workflow.constructs_lib.key_schema import LOCK_TABLE_KEY, KeySchema
from locked_workflow.state_machines import lock_protocol as p

#: Credentials used with ``--endpoint-url`` when none are configured (DynamoDB Local and
#: LocalStack accept them - DynamoDB Local wants letters and digits only, and keeps one database
#: per access key unless started with -sharedDb; real AWS refuses them, so they are never used
#: without an endpoint). The same as the offline runtime's (locked_workflow.testing).
DUMMY_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
#: Region with ``--endpoint-url`` when none is configured or given.
ENDPOINT_DEFAULT_REGION = "us-east-1"
#: Fail fast on an unreachable endpoint: botocore's default is 60 s per try, with retries.
CLIENT_CONFIG = {"connect_timeout": 5, "read_timeout": 20, "retries": {"max_attempts": 3, "mode": "standard"}}


def lock_tables(template: Mapping[str, Any], physical: Mapping[str, str]) -> list[str]:
    """The lock tables of a stack, by what they are: the tables of its ``LockTable`` constructs
    (their :data:`~lock_protocol.LOCK_TABLE_METADATA`, whatever their ids), else its tables
    keyed by the string partition key ``pk`` alone (a table passed to the constructs).
    ``physical``: logical id -> physical id of the stack's resources."""
    tables = {logical: resource for logical, resource in (template.get("Resources") or {}).items()
              if isinstance(resource, Mapping) and resource.get("Type") == "AWS::DynamoDB::Table"}
    marked = [logical for logical, r in tables.items() if p.LOCK_TABLE_METADATA in (r.get("Metadata") or {})]
    chosen = marked or [logical for logical, r in tables.items() if _keyed_as_lock_table(r.get("Properties") or {})]
    return [physical[logical] for logical in chosen if physical.get(logical)]  # (deployed ones)


def _keyed_as_lock_table(properties: Mapping[str, Any]) -> bool:
    """The table's key is the string partition key ``pk`` alone (as a LockTable's)."""
    return KeySchema.parse(properties.get("KeySchema"), properties.get("AttributeDefinitions")) == LOCK_TABLE_KEY


def table_name(args: argparse.Namespace, session: Any) -> str:
    if args.table:
        return args.table
    if not args.stack:
        raise CliError("the lock table is unknown: give --table NAME or --stack STACK")
    cloudformation = client(session, "cloudformation", args)
    try:
        if args.output is not None:
            outputs = cloudformation.describe_stacks(StackName=args.stack)["Stacks"][0].get("Outputs", [])
            for output in outputs:
                if output["OutputKey"] == args.output:
                    return output["OutputValue"]
            raise CliError(f"stack {args.stack!r} has no output {args.output!r} (its outputs: "
                           f"{', '.join(o['OutputKey'] for o in outputs) or 'none'})")
        template = cloudformation.get_template(StackName=args.stack)["TemplateBody"]
        physical, token = {}, None
        while True:
            page = cloudformation.list_stack_resources(StackName=args.stack, **({"NextToken": token} if token else {}))
            physical.update({r["LogicalResourceId"]: r.get("PhysicalResourceId") for r in page["StackResourceSummaries"]})
            token = page.get("NextToken")
            if not token:
                break
    except CliError:
        raise
    except Exception as error:
        raise CliError(f"cannot read stack {args.stack!r}: {one_line(error)}") from None
    if isinstance(template, str):  # botocore decodes a JSON template; a YAML one stays text
        try:
            template = json.loads(template)
        except ValueError:
            raise CliError(f"stack {args.stack!r} has a template that is not JSON: give --table") from None
    tables = lock_tables(template, physical)
    if not tables:
        raise CliError(f"stack {args.stack!r} has no lock table (a LockTable's, or one keyed by the string "
                       f"partition key {p.KEY_ATTRIBUTE} alone): give --table")
    if len(tables) > 1:
        raise CliError(f"stack {args.stack!r} has {len(tables)} lock tables ({', '.join(sorted(tables))}): give --table")
    return tables[0]


def _endpoint(args: argparse.Namespace, service: str) -> dict:
    kwargs: dict[str, Any] = {}
    if args.region:
        kwargs["region_name"] = args.region
    if args.endpoint_url and service == "dynamodb":
        kwargs["endpoint_url"] = args.endpoint_url
    return kwargs


def session_of(args: argparse.Namespace) -> tuple[Any, bool]:
    """boto3's session - for an endpoint, with region us-east-1 when none is configured, and
    dummy credentials when none are - and whether the credentials are dummy."""
    import boto3

    session = boto3.Session()
    if not args.endpoint_url:
        return session, False
    region = args.region or session.region_name or ENDPOINT_DEFAULT_REGION
    if session.get_credentials() is not None:
        return boto3.Session(region_name=region), False
    return boto3.Session(region_name=region, **DUMMY_CREDENTIALS), True


def client(session: Any, service: str, args: argparse.Namespace) -> Any:
    from botocore.config import Config

    return session.client(service, config=Config(**CLIENT_CONFIG), **_endpoint(args, service))


def one_line(text: Any) -> str:
    return " ".join(str(text).split())

