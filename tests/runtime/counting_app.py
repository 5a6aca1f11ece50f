"""The digits app, plus a line on the worker's stderr for every step it finishes (with
its time): the ground truth the progress lines are checked against."""

import sys

from airflow_tfk.runtime.examples.digits_app import DigitsApp

MARK = "tfk-test-step"


class CountingDigits(DigitsApp):
    def train_step(self, batch):
        import tensorflow as tf

        loss = super().train_step(batch)
        tf.print(MARK, tf.timestamp(), output_stream=sys.stderr)
        return loss


if __name__ == "__main__":
    CountingDigits.main()
