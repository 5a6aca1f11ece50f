"""What can be checked of the images without a Docker engine: the files they COPY exist
(and are not excluded from the build context), every ARG is declared where it is used and
used where it is declared, the final user is not root, the training image installs the
runtime without Airflow, and the serving config points where the runtime exports."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
TRAINING = IMAGES / "training" / "Dockerfile"
SERVING = IMAGES / "serving" / "Dockerfile"
VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::[-+][^}]*)?\}?")


@dataclass
class Stage:
    base: str
    name: str | None
    args: dict[str, str | None] = field(default_factory=dict)
    env: set[str] = field(default_factory=set)
    instructions: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Dockerfile:
    global_args: dict[str, str | None]
    stages: list[Stage]

    def all(self, keyword: str) -> list[tuple[Stage, str]]:
        return [(s, rest) for s in self.stages for k, rest in s.instructions if k == keyword]


def parse(path: Path) -> Dockerfile:
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [ln.strip() for ln in text.splitlines()]
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for line in lines:
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
            continue
        if keyword == "ARG":
            name, eq, default = rest.partition("=")
            (stages[-1].args if stages else global_args)[name] = default if eq else None
            continue
        assert stages, f"{path}: {keyword} before FROM"
        if keyword == "ENV":
            for item in shlex.split(rest):
                stages[-1].env.add(item.partition("=")[0])
        stages[-1].instructions.append((keyword, rest))
    return Dockerfile(global_args, stages)


def expand(value: str, args: dict[str, str | None]) -> str:
    return VAR.sub(lambda m: args.get(m.group(1)) or "", value)


def ignore_patterns(dockerfile: Path) -> list[str]:
    path = dockerfile.with_name(dockerfile.name + ".dockerignore")
    if not path.exists():
        return []
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def excluded(rel: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; '!' re-includes."""
    result = False
    for pat in patterns:
        negate = pat.startswith("!")
        pat = pat[1:] if negate else pat
        pat = pat.rstrip("/")
        parts = rel.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if any(fnmatch.fnmatch(p, pat) for p in prefixes) or (
            pat.startswith("**/") and fnmatch.fnmatch(parts[-1], pat[3:])
        ):
            result = not negate
    return result


@pytest.fixture(params=[TRAINING, SERVING], ids=["training", "serving"])
def dockerfile(request):
    return request.param


def test_copied_files_exist_in_the_context(dockerfile):
    df = parse(dockerfile)
    patterns = ignore_patterns(dockerfile)
    copies = df.all("COPY")
    assert copies
    for _stage, rest in copies:
        words = [w for w in rest.split() if not w.startswith("--chown")]
        if words[0].startswith("--from"):
            names = [s.name for s in df.stages]
            assert words[0].split("=", 1)[1] in names, rest
            continue
        for src in words[:-1]:
            matches = list(REPO.glob(src))
            assert matches, f"{dockerfile}: COPY source {src} does not exist"
            assert not excluded(src, patterns), f"{src} is excluded by the .dockerignore"


def test_args_are_declared_where_used_and_used_where_declared(dockerfile):
    df = parse(dockerfile)
    for stage in df.stages:
        for name in VAR.findall(stage.base):
            assert name in df.global_args, f"FROM uses {name} not declared before FROM"
        for keyword, rest in stage.instructions:
            if keyword in ("RUN", "COPY", "USER", "WORKDIR", "ENV", "LABEL", "EXPOSE"):
                for name in VAR.findall(rest):
                    # shell variables set inside RUN are not build args
                    if keyword == "RUN" and name not in df.global_args and name not in stage.args:
                        continue
                    assert name in stage.args or name in stage.env, (
                        f"{keyword} uses ${name}, not declared in this stage "
                        "(an ARG before FROM is not visible after it)"
                    )
        used = " ".join(rest for _, rest in stage.instructions)
        for name in stage.args:
            assert re.search(rf"\$\{{?{name}\b", used), f"ARG {name} is never used"
    bases = " ".join(s.base for s in df.stages)
    for name in df.global_args:
        assert f"${{{name}}}" in bases, f"global ARG {name} is never used"


def test_final_user_is_not_root(dockerfile):
    df = parse(dockerfile)
    final = df.stages[-1]
    users = [rest for k, rest in final.instructions if k == "USER"]
    assert users, "the final stage must set USER"
    user = expand(users[-1], {**df.global_args, **final.args}).split(":")
    assert user[0] and user[0] not in ("0", "root")
    assert user[0].isdigit(), "a numeric UID lets the kubelet verify runAsNonRoot"
    # nothing after the USER switches back
    last_user = max(i for i, (k, _) in enumerate(final.instructions) if k == "USER")
    assert all(k != "USER" for k, _ in final.instructions[last_user + 1 :])


def runtime_extra() -> list[Requirement]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [Requirement(r) for r in data["project"]["optional-dependencies"]["runtime"]]


def test_training_image_installs_the_runtime_not_airflow():
    df = parse(TRAINING)
    final = df.stages[-1]
    runs = " ".join(rest for k, rest in final.instructions if k == "RUN")
    # the TF version is a build arg, within what the runtime supports
    tf_version = final.args["TF_VERSION"]
    tf_req = next(r for r in runtime_extra() if r.name == "tensorflow")
    assert Version(tf_version) in tf_req.specifier, (tf_version, str(tf_req))
    assert '"${TF_PACKAGE}==${TF_VERSION}"' in runs
    # the other runtime dependencies, and nothing of Airflow's
    for req in runtime_extra():
        if req.name != "tensorflow":
            assert re.search(rf"\b{re.escape(req.name)}\b", runs), f"{req.name} not installed"
    installed = [
        w
        for cmd in re.split(r"&&|;", runs)
        if "pip install" in cmd
        for w in shlex.split(cmd.split("pip install", 1)[1])
        if not w.startswith("-")
    ]
    assert not [w for w in installed if "airflow" in w.lower() and not w.endswith(".whl")]
    assert "pip install --no-deps /tmp/dist/*.whl" in runs
    # the wheel stage has everything pyproject's build needs (force-include of templates)
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    needed = {
        "pyproject.toml",
        data["project"]["readme"],
        *data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"],
        *data["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"],
    }
    copied = {
        w.rstrip("/") for _, rest in df.all("COPY") for w in rest.split()[:-1] if not w.startswith("--")
    }
    assert needed <= copied, needed - copied


def test_serving_image_serves_the_runtimes_export_layout():
    df = parse(SERVING)
    final = df.stages[-1]
    assert final.base.startswith("tensorflow/serving:")
    entry = json.loads(next(rest for k, rest in final.instructions if k == "ENTRYPOINT"))
    assert entry[0] == "tensorflow_model_server"
    flags = dict(a.lstrip("-").split("=", 1) for a in entry[1:])
    assert flags["port"] == "8500" and flags["rest_api_port"] == "8501"
    copy = next(rest for k, rest in final.instructions if k == "COPY").split()
    dest = copy[-1]
    for key in ("model_config_file", "monitoring_config_file"):
        path = flags[key]
        assert path.startswith(dest) and any(Path(src).name == Path(path).name for src in copy[:-1])
    config = (IMAGES / "serving" / "models.config").read_text()
    names = re.findall(r'name:\s*"([^"]+)"', config)
    bases = re.findall(r'base_path:\s*"([^"]+)"', config)
    assert names and len(names) == len(bases)
    for name, base in zip(names, bases, strict=True):
        # the runtime exports to <TFK_MODEL_DIR>/<model name>/<version>/; /tfk/models is
        # where the templates mount the models volume
        assert base == f"/tfk/models/{name}"
    assert config.count("{") == config.count("}")
    assert 'model_platform: "tensorflow"' in config


def test_dockerignore_keeps_the_context_small():
    patterns = ignore_patterns(TRAINING)
    assert excluded(".venv/lib/python3.11/site-packages/x.py", patterns)
    assert excluded("tests/runtime/test_app.py", patterns)
    assert not excluded("airflow_tfk/runtime/app.py", patterns)
    assert excluded("airflow_tfk/__pycache__/x.pyc", patterns)


def test_serving_is_at_the_tensorflow_version_the_trainings_export_with():
    """TF Serving loads SavedModels written by the same or an older TensorFlow: the serving
    images (the provider's default and images/serving) are at the training image's version
    and the lock's, so a default publish never meets ops its server does not know."""
    from airflow_tfk.serving.spec import DEFAULT_SERVING_IMAGE, DEFAULT_TENSORBOARD_IMAGE

    def minor(version: str) -> tuple[int, int]:
        major, minor_, *_ = version.split(".")
        return int(major), int(minor_)

    training = parse(TRAINING).stages[-1].args["TF_VERSION"]
    serving = parse(SERVING).global_args["TF_SERVING_VERSION"]
    lock = (REPO / "requirements" / "lock.txt").read_text()
    locked = re.search(r"^tensorflow-cpu==([0-9.]+)", lock, re.M)
    assert training and serving and locked
    versions = {
        "images/training TF_VERSION": training,
        "the lock's tensorflow-cpu": locked.group(1),
        "images/serving TF_SERVING_VERSION": serving,
        "DEFAULT_SERVING_IMAGE": DEFAULT_SERVING_IMAGE.rsplit(":", 1)[1],
        "DEFAULT_TENSORBOARD_IMAGE": DEFAULT_TENSORBOARD_IMAGE.rsplit(":", 1)[1],
    }
    assert len({minor(v) for v in versions.values()}) == 1, versions
