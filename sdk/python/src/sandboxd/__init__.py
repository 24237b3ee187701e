"""sandboxd: the Python client of sandboxd.

    from sandboxd import Sandbox

    with Sandbox("127.0.0.1", grpc_port=9090, rest_port=8080) as sb:
        print(sb.run(["echo", "hi"]).stdout)
        sb.files.upload("local.bin", "data/remote.bin")

The asyncio flavour of the same API is sandboxd.aio.AsyncSandbox. Through a sandboxd-router,
Sandbox.connect(router="http://router:8080", name="my-sandbox", namespace="team-a"), or many
sandboxes over one connection with sandboxd.Router (sandboxd.router).
"""

from . import errors
from .client import Files, Process, Sandbox
from .errors import (ConflictError, FailedPreconditionError, InsufficientStorageError,
                     InternalError, InvalidArgumentError, NotFoundError, OutputTruncatedWarning,
                     PayloadTooLargeError, PermissionDeniedError, ProcessExitError,
                     ResourceExhaustedError,
                     SandboxError, TimeoutError, UnauthenticatedError, UnavailableError,
                     UnimplementedError)
from .processes import Attachment, Processes, SpawnedProcess
from .router import AsyncRouter, Router
from .terminal import Terminal
from .types import (CommandResult, ExitDetail, ExitStatus, FileEntry, FileStat, Health,
                    OutputChunk, OutputEvent, ProcessInfo, StreamOffsets, Truncated, UploadResult,
                    WatchEvent)
from .watch import AsyncWatch, Watch

__all__ = [
    "Sandbox", "Process", "Files", "errors", "SandboxError", "NotFoundError",
    "PermissionDeniedError", "InvalidArgumentError", "ConflictError", "FailedPreconditionError",
    "PayloadTooLargeError", "InsufficientStorageError", "ResourceExhaustedError",
    "UnauthenticatedError", "UnavailableError", "UnimplementedError", "TimeoutError",
    "InternalError", "ProcessExitError", "CommandResult", "ExitStatus", "FileEntry", "FileStat",
    "Health", "OutputEvent", "UploadResult", "Processes", "SpawnedProcess", "Attachment",
    "ExitDetail", "ProcessInfo", "StreamOffsets", "OutputChunk", "Truncated",
    "OutputTruncatedWarning", "Terminal", "Watch",
    "AsyncWatch", "WatchEvent", "Router", "AsyncRouter",
]
__version__ = "0.1.0"
