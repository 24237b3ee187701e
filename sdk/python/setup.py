"""Generates the protobuf and gRPC modules of sandboxd's proto/ into sandboxd/_gen at build time.

The .proto files are the repository's (../../proto, or $SANDBOXD_PROTO_DIR); the generated code is
not committed, so it can never drift from them. grpcio-tools (a build requirement) brings a protoc
that knows proto3 `optional`.
"""

import os
import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
PROTOS = ["process/v1/process.proto", "sandboxd/v1/processes.proto", "sandboxd/v1/files.proto"]


def proto_dir() -> Path:
    d = Path(os.environ.get("SANDBOXD_PROTO_DIR", HERE.parent.parent / "proto"))
    if not (d / PROTOS[0]).is_file():
        raise SystemExit(f"sandboxd: {PROTOS[0]} not found under {d} (set SANDBOXD_PROTO_DIR)")
    return d


def generate(out: Path) -> None:
    import grpc_tools
    from grpc_tools import protoc

    src = proto_dir()
    include = Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{src}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", *PROTOS]
    if protoc.main(args) != 0:
        raise SystemExit("sandboxd: protoc failed on " + " ".join(PROTOS))
    # protoc writes imports rooted at the proto path ("from process.v1 import ..."); the modules
    # live inside our package, so they are made relative to it.
    for py in out.rglob("*_grpc.py"):
        text = py.read_text()
        text = re.sub(r"^from (process|sandboxd)\.v1 import", r"from sandboxd._gen.\1.v1 import",
                      text, flags=re.M)
        py.write_text(text)
    for d in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()


# Generated before setup() so that package discovery sees sandboxd._gen and its subpackages.
generate(HERE / "src" / "sandboxd" / "_gen")
setup()
