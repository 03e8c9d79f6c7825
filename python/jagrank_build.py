"""Build helpers for the jagrank Python package, in one file:

* the gRPC stub generator used by CMake (target jagrank_python_stubs, output
  build/python/jagrank_stubs/) and by the wheel build:

      python3 python/jagrank_build.py stubs --out DIR [--protoc PROTOC]

  The protos are copied under jagrank_stubs/ before generation, so the
  generated modules are jagrank_stubs.ranker_pb2(_grpc) and
  jagrank_stubs.health_pb2(_grpc): no generated `grpc/` or `jagrank/` package
  shadows the real grpc package or this one. Messages come from `protoc
  --python_out` (protobuf-compiler; code for protobuf runtimes 3.20 and later),
  service stubs from `python3 -m grpc_tools.protoc --grpc_python_out`.

* a PEP 517 build backend (pyproject.toml names it, backend-path "."), so
  `pip install ./python` needs nothing from the network: it writes the wheel
  itself, with the stubs generated at build time when protoc and grpc_tools
  are present (without them the wheel has no client stubs and
  jagrank.client says how to get them).
"""

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

NAME = "jagrank"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# (proto in the repository, its name inside jagrank_stubs/)
PROTOS = [(os.path.join("proto", "jagrank", "v1", "ranker.proto"), "ranker.proto"),
          (os.path.join("proto", "grpc", "health", "v1", "health.proto"), "health.proto")]
STUBS_PACKAGE = "jagrank_stubs"


def generate_stubs(out_dir, protoc="protoc", repo=REPO, python=sys.executable):
    """Writes out_dir/jagrank_stubs/{__init__,ranker_pb2,ranker_pb2_grpc,health_pb2,health_pb2_grpc}.py."""
    with tempfile.TemporaryDirectory() as stage:
        os.makedirs(os.path.join(stage, STUBS_PACKAGE))
        staged = []
        for source, name in PROTOS:
            shutil.copyfile(os.path.join(repo, source), os.path.join(stage, STUBS_PACKAGE, name))
            staged.append(os.path.join(STUBS_PACKAGE, name))
        package_dir = os.path.join(out_dir, STUBS_PACKAGE)
        os.makedirs(package_dir, exist_ok=True)
        subprocess.run([protoc, "--proto_path=" + stage, "--python_out=" + out_dir] + staged, check=True, cwd=stage)
        # pip's isolated build environment replaces PYTHONPATH to hide the
        # interpreter's site-packages; grpc_tools lives there, so the
        # generator runs with the interpreter's own paths.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
        subprocess.run([python, "-m", "grpc_tools.protoc", "--proto_path=" + stage, "--grpc_python_out=" + out_dir]
                       + staged, check=True, cwd=stage, env=env)
        with open(os.path.join(package_dir, "__init__.py"), "w") as f:
            f.write('"""Generated from proto/jagrank/v1/ranker.proto and proto/grpc/health/v1/health.proto."""\n')


# ---- PEP 517 ---------------------------------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _metadata():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    # No Requires-Dist: torch, numpy, PyYAML, grpcio and protobuf come from the
    # system (Debian: python3-torch python3-numpy python3-yaml python3-grpcio
    # python3-protobuf) or the user's environment; declaring them would send
    # pip to an index.
    return ("Metadata-Version: 2.1\nName: {n}\nVersion: {v}\n"
            "Summary: PyTorch twin, safetensors export and gRPC client of the jagrank ranking server\n"
            "Requires-Python: >=3.8\nDescription-Content-Type: text/markdown\n\n{r}").format(
                n=NAME, v=VERSION, r=readme)


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "{},sha256={},{}".format(arcname, digest, len(data))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    package = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name), "rb") as f:
                files[NAME + "/" + name] = f.read()
    protoc = shutil.which("protoc")
    if protoc and all(os.path.exists(os.path.join(REPO, p)) for p, _ in PROTOS):
        with tempfile.TemporaryDirectory() as out:
            try:
                generate_stubs(out, protoc=protoc)
                for name in sorted(os.listdir(os.path.join(out, STUBS_PACKAGE))):
                    if name.endswith(".py"):
                        with open(os.path.join(out, STUBS_PACKAGE, name), "rb") as f:
                            files[STUBS_PACKAGE + "/" + name] = f.read()
            except (subprocess.CalledProcessError, OSError) as e:
                sys.stderr.write("jagrank: no gRPC stubs in the wheel ({}); jagrank.client needs them\n".format(e))
    else:
        sys.stderr.write("jagrank: protoc or the protos not found: no gRPC stubs in the wheel\n")
    dist_info = "{}-{}.dist-info".format(NAME, VERSION)
    files[dist_info + "/METADATA"] = _metadata().encode("utf-8")
    files[dist_info + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: jagrank_build\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n").encode()
    top_level = sorted({name.split("/")[0] for name in files if not name.startswith(dist_info)})
    files[dist_info + "/top_level.txt"] = ("\n".join(top_level) + "\n").encode()
    record = [_record_line(name, data) for name, data in files.items()] + [dist_info + "/RECORD,,"]
    files[dist_info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_name = "{}-{}-py3-none-any.whl".format(NAME, VERSION)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    import tarfile
    base = "{}-{}".format(NAME, VERSION)
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for name in ("pyproject.toml", "jagrank_build.py", "README.md", NAME):
            tar.add(os.path.join(HERE, name), arcname=base + "/" + name,
                    filter=lambda t: None if "__pycache__" in t.name else t)
    return base + ".tar.gz"


def main(argv):
    import argparse
    parser = argparse.ArgumentParser(description="jagrank build helpers")
    sub = parser.add_subparsers(dest="command", required=True)
    stubs = sub.add_parser("stubs", help="generate the gRPC stubs package jagrank_stubs/ under --out")
    stubs.add_argument("--out", required=True)
    stubs.add_argument("--protoc", default="protoc")
    args = parser.parse_args(argv)
    generate_stubs(args.out, protoc=args.protoc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
