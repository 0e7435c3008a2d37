"""``locked-workflow locks list|show|release|clear-head``: who holds a lock, since when, and freeing it.

Works against AWS (boto3's credentials and region; ``--table`` or ``--stack``) and any
endpoint (``--endpoint-url``: DynamoDB Local, LocalStack - region us-east-1 unless one is
configured or given, and dummy credentials when none are configured). ``--json`` prints machine-readable
output. A forced release is conditioned on the exact holder and fence it read - never on a
guess: if the lock changed in between, nothing is released. A semaphore's holders are its
slots (``list`` shows them): ``show``/``release`` one with ``--slot N``.

Every failure is one line on stderr (exit 1), never a traceback: unreachable endpoints,
timeouts, throttling, refused calls and bad arguments alike (argparse's usage errors: exit 2).

    locked-workflow --table Locks locks list --namespace customer --held
    locked-workflow --stack CustomerUpdates locks show 42 --namespace customer
    locked-workflow --table Locks locks release 42 --namespace customer --force
    locked-workflow --table Locks locks clear-head 42 --namespace customer   # a fair lock's dead head
    locked-workflow --table Locks locks release api --namespace sem --slot 2 --force
    locked-workflow --table Locks locks release 42 --namespace customer --reader 'arn:...#uuid' --force

A read/write lock's shared hold shows ``mode: shared`` and its readers, each with its own lease
and execution; ``release --reader OWNER`` removes one reader's hold (the last one out hands the
key to the next waiters).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from typing import Any, Mapping, NoReturn, Sequence

from locked_workflow.constructs_lib.cli_aws import client, one_line, session_of, table_name
from locked_workflow.constructs_lib.cli_commands import (
    FAILED,
    REFUSED,
    CliError,
    cmd_clear_head,
    cmd_list,
    cmd_rate,
    cmd_release,
    cmd_show,
)
from locked_workflow.constructs_lib.cli_items import Locks


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors on one line (and exit 2, as argparse)."""

    def error(self, message: str) -> "NoReturn":  # type: ignore[override]
        print(f"error: {one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(REFUSED)


#: The ``--help`` description (plain text: the module's docstring is reStructuredText).
DESCRIPTION = __doc__.splitlines()[0].replace("``", "")



def parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--table", help="the lock table's name")
    common.add_argument("--stack", help="read the lock table from this CloudFormation stack")
    common.add_argument("--output", help="the stack output holding the table name (default: the stack's lock "
                                          "table, found in its template)")
    common.add_argument("--region", help="AWS region (default: boto3's)")
    common.add_argument("--endpoint-url", help="DynamoDB endpoint (DynamoDB Local, say)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    root = _Parser(prog="locked-workflow", description=DESCRIPTION)
    groups = root.add_subparsers(dest="group", required=True, parser_class=_Parser)
    locks = groups.add_parser("locks", help="inspect and free locks").add_subparsers(
        dest="command", required=True, parser_class=_Parser)
    listing = locks.add_parser("list", parents=[common], help="every lock item")
    listing.add_argument("--namespace", default=None)
    listing.add_argument("--held", action="store_true", help="only held (or expired, unreleased) locks")
    show = locks.add_parser("show", parents=[common], help="one lock: holder, its execution, fence")
    show.add_argument("key")
    show.add_argument("--namespace", default="")
    show.add_argument("--slot", type=int, help="a semaphore's slot (as `list` shows it)")
    release = locks.add_parser("release", parents=[common], help="free a lock, conditioned on its holder")
    release.add_argument("key")
    release.add_argument("--namespace", default="")
    release.add_argument("--slot", type=int, help="a semaphore's slot (as `list` shows it)")
    release.add_argument("--force", action="store_true", help="really release (without it: say what would happen)")
    release.add_argument("--owner", help="release only if this is the holder")
    release.add_argument("--fence", type=int, help="release only if this is the fence")
    release.add_argument("--reader", help="a read/write lock's shared hold: remove this reader's hold")
    limited = locks.add_parser("rate", parents=[common], help="a rate limit (Lock.rate): admissions, next permit")
    limited.add_argument("key")
    limited.add_argument("--namespace", default="")
    limited.add_argument("--period", type=int, default=60, help="the limit's period in seconds (default: 60)")
    limited.add_argument("--limit", type=int, help="the limit's limit: shows when the next permit frees")
    clear = locks.add_parser("clear-head", parents=[common], help="a fair lock: clear a dead head from its queue")
    clear.add_argument("key")
    clear.add_argument("--namespace", default="")
    clear.add_argument("--force", action="store_true", help="clear it even while its execution may still run")
    return root


def _print(result: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    if isinstance(result, list):
        if not result:
            print("no lock items")
        for r in result:
            if r["state"] == "rate":  # (a rate limit's item: no holder)
                print(f"{r['namespace']}#{r['key']} rate limit: {r['admissions']} admissions, "
                      f"{r['inLastPeriod']} in the last 60 s")
                continue
            slot = f" slot {r['slot']}" if r["slot"] is not None else ""
            print(f"{r['namespace']}#{r['key']}{slot}: {r['state']}, fence {r['fence']}"
                  + (f", held by {r['owner']} since {r['acquiredAt']}, expires {r['expiresAt']}" if r["owner"] else "")
                  + (f", shared by {len(r['readers'])} reader(s)" if r.get("mode") == "shared" else ""))
        return
    for name in ("warning", "message"):
        if result.get(name):
            print(result[name])
    for name, value in result.items():
        if name == "waiters" and isinstance(value, list):
            print(f"  waiters: {len(value)}" + ("" if value else " (none)"))
            for n, w in enumerate(value, 1):
                print(f"    {n}. {w['owner']} ({w['waits']})")  # (a fair lock's waiters, head first)
        elif name == "readers" and isinstance(value, list):
            print(f"  readers: {len(value)}")
            for r in value:  # (a read/write lock's shared hold: each reader's own lease)
                status = f", execution {r['executionStatus']}" if r.get("executionStatus") else ""
                print(f"    {r['owner']} ({r['state']}, since {r['acquiredAt']}, expires {r['expiresAt']}{status})")
        elif name not in ("warning", "message") and value is not None:
            print(f"  {name}: {value}")


def main(argv: Sequence[str] | None = None, *, clients: Mapping[str, Any] | None = None) -> int:
    """Run the CLI; ``clients`` (``dynamodb``, ``stepfunctions``, ``session``) for tests."""
    args = parser().parse_args(argv)
    region = args.region
    try:
        from botocore.exceptions import (
            BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError,
            NoRegionError, ReadTimeoutError,
        )

        clients = dict(clients or {})
        table = args.table
        try:
            if "session" in clients:
                session, dummy = clients["session"], False
            else:
                session, dummy = session_of(args)
            region = args.region or getattr(session, "region_name", None)
            table = table_name(args, session)
            dynamodb = clients.get("dynamodb") or client(session, "dynamodb", args)
            region = dynamodb.meta.region_name or region  # the region actually used
            stepfunctions = clients.get("stepfunctions") or (None if dummy else client(session, "stepfunctions", args))
            command = {"list": cmd_list, "show": cmd_show, "release": cmd_release,
                       "clear-head": cmd_clear_head, "rate": cmd_rate}[args.command]
            code, result = command(Locks(dynamodb, stepfunctions, table), args, int(time.time() * 1000))
        except ClientError as error:
            code_name = error.response.get("Error", {}).get("Code")
            if code_name == "ResourceNotFoundException":
                raise CliError(f"no table {table!r} (region {region or 'unknown'})") from None
            if code_name in ("ThrottlingException", "ProvisionedThroughputExceededException",
                             "RequestLimitExceeded", "TooManyRequestsException"):
                raise CliError(
                    f"AWS is throttling the calls (region {region or 'unknown'}), even after retries: "
                    f"try again later ({code_name})"
                ) from None
            raise CliError(f"AWS refused (region {region or 'unknown'}): {one_line(error)}") from None
        except NoCredentialsError:
            raise CliError("no AWS credentials: configure them (aws configure, AWS_PROFILE, ...)") from None
        except NoRegionError:
            raise CliError("no AWS region: pass --region or set AWS_REGION") from None
        except EndpointConnectionError as error:
            raise CliError(f"cannot connect to {_endpoint_of(error, args)} (region {region or 'unknown'}): "
                           "is it running, and is the URL right?") from None
        except (ConnectTimeoutError, ReadTimeoutError) as error:
            raise CliError(f"timed out talking to {_endpoint_of(error, args)} (region {region or 'unknown'}): "
                           f"{one_line(error)}") from None
        except BotoCoreError as error:
            raise CliError(f"AWS client error (region {region or 'unknown'}): {one_line(error)}") from None
    except CliError as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return FAILED
    except Exception as error:  # a bug: still one line, with what to report
        print(f"error: unexpected {type(error).__name__}: {one_line(error)} (please report it)", file=sys.stderr)
        return FAILED
    try:
        _print(result, args.json)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say, and no traceback
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass  # not a real file (a test's capture): nothing will flush into the pipe
    return code


def _endpoint_of(error: Exception, args: argparse.Namespace) -> str:
    return args.endpoint_url or getattr(error, "kwargs", {}).get("endpoint_url") or "AWS"


if __name__ == "__main__":
    raise SystemExit(main())
