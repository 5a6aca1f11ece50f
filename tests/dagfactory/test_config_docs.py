"""The sweep block's reference table (docs/sweeps.md) and the serving spec's
(docs/serving.md) are generated from their classes: a key added to a class appears in the
table, a key without a meaning fails, and a stale page fails until
scripts/gen_spec_docs.py is rerun."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from airflow_tfk.dagfactory.config_docs import (
    SERVING_BEGIN,
    SERVING_END,
    SWEEP_BEGIN,
    SWEEP_END,
    config_rows,
    param_docs,
    serving_rows,
    serving_table,
    sweep_rows,
    sweep_table,
)
from airflow_tfk.serving.spec import ServingSpec
from airflow_tfk.spec.network import ServiceNetworkPolicy
from airflow_tfk.sweep.config import ParamSpec, PrunerSpec, SamplerSpec, SweepConfig

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


def test_the_page_holds_the_table_the_classes_generate() -> None:
    from gen_spec_docs import readme_with_table

    page = (ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8")
    assert readme_with_table(page, sweep_table(), SWEEP_BEGIN, SWEEP_END) == page, (
        "stale: run python scripts/gen_spec_docs.py"
    )


def test_every_key_of_every_block_has_a_row_and_a_meaning() -> None:
    rows = {key: meaning for key, _, meaning in sweep_rows()}
    expected = (
        {f.name for f in dataclasses.fields(SweepConfig)}
        | {f"search_space.<flag>.{f.name}" for f in dataclasses.fields(ParamSpec)}
        | {f"sampler.{f.name}" for f in dataclasses.fields(SamplerSpec)}
        | {f"pruner.{f.name}" for f in dataclasses.fields(PrunerSpec)}
    )
    assert set(rows) == expected
    assert not [key for key, meaning in rows.items() if not meaning.strip()], "a key without :param: text"


def test_a_new_key_shows_in_the_table_with_its_default_and_meaning() -> None:
    @dataclasses.dataclass(frozen=True)
    class Grown(SweepConfig):
        """:param patience: trials without improvement before the sweep stops."""

        patience: int = 5

    rows = {key: (default, meaning) for key, default, meaning in config_rows(Grown)}
    assert rows["patience"] == ("`5`", "trials without improvement before the sweep stops.")


def test_a_key_without_a_meaning_is_found() -> None:
    @dataclasses.dataclass(frozen=True)
    class Undocumented(SamplerSpec):
        silent: bool = False

    assert ("silent", "`false`", "") in config_rows(Undocumented)


def test_the_serving_page_holds_the_table_the_spec_generates() -> None:
    from gen_spec_docs import readme_with_table

    page = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    assert readme_with_table(page, serving_table(), SERVING_BEGIN, SERVING_END) == page, (
        "stale: run python scripts/gen_spec_docs.py"
    )


def test_every_serving_key_has_a_row_and_a_meaning_the_required_one_first() -> None:
    rows = serving_rows()
    keys = {key for key, _, _ in rows}
    assert keys == {f.name for f in dataclasses.fields(ServingSpec)} | {
        f"network_policy.{f.name}" for f in dataclasses.fields(ServiceNetworkPolicy)
    }
    assert rows[0][:2] == ("model_name", "required")
    assert not [key for key, _, meaning in rows if not meaning.strip()], "a key without :param: text"


def test_a_base_class_documents_its_fields_and_a_subclass_may_say_more() -> None:
    @dataclasses.dataclass(frozen=True)
    class Base:
        """:param a: said by the base.
        :param b: said by the base, then
            on a second line with a :class:`~x.y.Role` in it."""

        a: int = 1
        b: int = 2

    @dataclasses.dataclass(frozen=True)
    class Sub(Base):
        """:param a: said again by the subclass."""

    assert param_docs(Sub) == {
        "a": "said again by the subclass.",
        "b": "said by the base, then on a second line with a :class:`~x.y.Role` in it.",
    }


def test_the_provider_config_file_is_what_the_policy_declares() -> None:
    import json

    from airflow_tfk.dagfactory.config_docs import provider_config
    from airflow_tfk.provider_info import CONFIG_FILE, get_provider_info
    from airflow_tfk.spec.platform_policy import PlatformPolicy

    written = json.loads((ROOT / "airflow_tfk" / CONFIG_FILE).read_text(encoding="utf-8"))
    assert written == provider_config(), "stale: run python scripts/gen_spec_docs.py"
    assert get_provider_info()["config"] == written
    assert set(written["tfk_policy"]["options"]) == {f.name for f in dataclasses.fields(PlatformPolicy)}


def test_airflow_reading_the_provider_info_imports_no_module_of_the_stages() -> None:
    """Every Airflow process reads it while loading its configuration."""
    import subprocess

    code = (
        "import sys; from airflow_tfk.provider_info import get_provider_info; get_provider_info(); "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('airflow_tfk.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    # the package's lazy face and the entry point itself, nothing of a stage
    assert set(out.stdout.split()) <= {
        "airflow_tfk.core",
        "airflow_tfk.core.lazy",
        "airflow_tfk.provider_info",
    }
