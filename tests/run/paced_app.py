"""The digits app at a set pace: each step takes at least ``--pace_seconds`` (a training
whose rate, and so whose ETA, a test chooses). Run as ``python -m tests.run.paced_app``."""

from __future__ import annotations

import time

from airflow_tfk.runtime.examples.digits_app import DigitsApp


class PacedDigitsApp(DigitsApp):
    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--pace_seconds", type=float, default=0.05)

    def progress_due(self, step: int) -> bool:  # asked once per step by the training loop
        time.sleep(self.args.pace_seconds)
        return super().progress_due(step)


if __name__ == "__main__":
    PacedDigitsApp.main()
