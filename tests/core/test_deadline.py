from airflow_tfk.core.deadline import SYSTEM, Clock


class FakeTime:
    def __init__(self) -> None:
        self.now, self.slept = 100.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_deadline_passes_when_its_clock_reaches_it_and_never_sleeps_past_it() -> None:
    time = FakeTime()
    deadline = Clock(time, time.sleep).deadline(2.5)
    assert deadline.at == 102.5 and not deadline.passed()
    deadline.pause(1.0)
    deadline.pause(1.0)
    assert not deadline.passed()
    deadline.pause(1.0)  # only 0.5 s are left
    assert deadline.passed()
    assert time.slept == [1.0, 1.0, 0.5]
    deadline.pause(1.0)  # past it: no sleep at all
    assert time.slept[-1] == 0.0


def test_the_system_clock_is_monotonic_time() -> None:
    import time

    assert SYSTEM.now is time.monotonic and SYSTEM.sleep is time.sleep
