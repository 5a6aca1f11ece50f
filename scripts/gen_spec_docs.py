"""Write what the declarations generate: the field table of docs/cluster-spec.md, the
sweep block's table of docs/sweeps.md and the serving spec's of docs/serving.md (between
their markers), the training files' JSON Schema
(airflow_tfk/dagfactory/training-file.schema.json) and the provider's config sections
(airflow_tfk/dagfactory/provider-config.json, read by provider_info).

Usage: python scripts/gen_spec_docs.py [--check]   (--check: exit 1 when either is stale)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from airflow_tfk.dagfactory.config_docs import (
    SERVING_BEGIN,
    SERVING_END,
    SWEEP_BEGIN,
    SWEEP_END,
    provider_config,
    serving_table,
    sweep_table,
)
from airflow_tfk.dagfactory.spec_docs import README_BEGIN, README_END, SCHEMA_FILE, readme_table, schema_text
from airflow_tfk.provider_info import CONFIG_FILE

ROOT = Path(__file__).resolve().parents[1]


def readme_with_table(readme: str, table: str, begin: str = README_BEGIN, end: str = README_END) -> str:
    head, rest = readme.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{table}\n{end}{tail}"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    targets = {
        ROOT / "docs" / "cluster-spec.md": lambda text: readme_with_table(text, readme_table()),
        ROOT / "docs" / "sweeps.md": lambda text: readme_with_table(
            text, sweep_table(), SWEEP_BEGIN, SWEEP_END
        ),
        ROOT / "docs" / "serving.md": lambda text: readme_with_table(
            text, serving_table(), SERVING_BEGIN, SERVING_END
        ),
        ROOT / "airflow_tfk" / "dagfactory" / SCHEMA_FILE: lambda text: schema_text(),
        ROOT / "airflow_tfk" / CONFIG_FILE: lambda text: json.dumps(provider_config(), indent=2) + "\n",
    }
    stale = []
    for path, make in targets.items():
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        new = make(old)
        if new != old:
            stale.append(path.name)
            if not check:
                path.write_text(new, encoding="utf-8")
    if stale:
        print(("stale: " if check else "wrote: ") + ", ".join(stale))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
