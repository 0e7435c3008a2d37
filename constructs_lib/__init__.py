"""The constructs, the lock client and the CLI (``locked_workflow.constructs_lib``).

Import the public API from the package itself: ``from locked_workflow import LockedWorkflow``.
"""
