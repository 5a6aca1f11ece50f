"""The trigger form of ``tfk_ui_training`` in a real browser, against Airflow's own services.

Airflow's api-server, scheduler, dag-processor and triggerer run as processes with the
LocalExecutor and Postgres (``airflow_services.py``); headless Chromium from Debian's
packages is driven through its WebDriver (Selenium). The test opens the DAG's trigger
form, sees it refuse invalid values, submits valid ones with TensorBoard ticked, watches
the run succeed on the local backend (real distributed TensorFlow), and follows the train
task's "TensorBoard" link to a TensorBoard that answers. Screenshots of every step and
the services' logs are kept in ``test-artifacts/browser/`` (``$TFK_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .airflow_services import ROOT, AirflowServices

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

DAG_ID = "tfk_ui_training"
ARTIFACTS = Path(os.environ.get("TFK_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "browser"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1300",
)


def api(services: AirflowServices, path: str) -> Any:
    with urllib.request.urlopen(f"{services.url}/api/v2{path}", timeout=30) as resp:
        return json.load(resp)


def wait_for(what: str, predicate, timeout: float, services: AirflowServices | None = None, every: float = 2):
    deadline = time.monotonic() + timeout
    while True:
        if services is not None:
            services.check_alive()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServices]:
    deps = subprocess.run(["bash", str(ROOT / "scripts" / "browser-deps.sh")], capture_output=True, text=True)
    assert deps.returncode == 0, f"scripts/browser-deps.sh failed: {deps.stderr[-2000:]}"
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    base = tmp_path_factory.mktemp("airflow-services")
    dags = base / "dags"
    dags.mkdir()
    # Only the DAG under test: the dag-processor parses it within seconds.
    (dags / f"{DAG_ID}.py").symlink_to(ROOT / "dags" / f"{DAG_ID}.py")
    svc = AirflowServices(base, dags, ARTIFACTS)
    svc.start()
    try:
        svc.wait_ready()
        wait_for("the DAG to be parsed", lambda: _dag_known(svc), 180, svc)
        yield svc
    finally:
        _stop_what_the_run_left(svc)
        svc.stop()


def _dag_known(svc: AirflowServices) -> bool:
    try:
        return api(svc, f"/dags/{DAG_ID}")["dag_id"] == DAG_ID
    except OSError:
        return False


def _stop_what_the_run_left(svc: AirflowServices) -> None:
    """TensorBoard keeps running after the run by design; clusters must already be gone."""
    from airflow_tfk.backends.base import ClusterRef
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.serving.spec import TensorBoardSpec, default_name
    from airflow_tfk.tensorboard.local import LocalTensorBoard

    root = str(svc.local_root)
    LocalTensorBoard(TensorBoardSpec(name=default_name("tb", DAG_ID), claim="tfk-logs"), root).stop(print)
    backend = LocalBackend(root)
    for state in svc.local_root.glob("*/*/state.json"):  # a failed run's cluster, if any
        backend.delete(ClusterRef(name=state.parent.name, namespace=state.parent.parent.name))


@pytest.fixture(scope="module")
def browser(services: AirflowServices) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(
        service=Service("/usr/bin/chromedriver", log_output=str(ARTIFACTS / "chromedriver.log")),
        options=options,
    )
    driver.implicitly_wait(20)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: Any, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def fill(driver: Any, name: str, value: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = driver.find_element(By.NAME, f"element_{name}")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(value)
    field.send_keys(Keys.TAB)
    return field


def open_form(driver: Any, services: AirflowServices) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{services.url}/dags/{DAG_ID}")
    # The first page load fetches and runs the UI's whole bundle: slow on a busy machine.
    trigger = (By.XPATH, "//button[normalize-space()='Trigger']")
    WebDriverWait(driver, 180).until(ec.element_to_be_clickable(trigger)).click()
    driver.find_element(By.XPATH, f"//*[normalize-space()='Trigger Dag - {DAG_ID}']")
    driver.find_element(By.NAME, "element_workers")


def submit(driver: Any) -> None:
    from selenium.webdriver.common.by import By

    # The header's button opened the form; the form's own is the last one.
    driver.find_elements(By.XPATH, "//button[normalize-space()='Trigger']")[-1].click()


def runs(services: AirflowServices) -> list[dict]:
    return api(services, f"/dags/{DAG_ID}/dagRuns")["dag_runs"]


def test_trigger_form_refuses_bad_values_then_runs_training_with_tensorboard(services, browser):
    try:
        scenario(services, browser)
    except BaseException:
        shot(browser, "99-failure")  # what the page showed when it went wrong
        raise


def scenario(services: AirflowServices, driver: Any) -> None:
    from selenium.webdriver.common.by import By

    open_form(driver, services)
    shot(driver, "01-form")
    for label in (
        "Workers",
        "Parameter servers",
        "Training steps",
        "Training image",
        "Mode",
        "PS grace seconds",
        "Start TensorBoard",
    ):
        assert driver.find_elements(By.XPATH, f"//*[text()[starts-with(normalize-space(), '{label}')]]"), (
            label
        )

    # Out of range: the number field does not keep a value above the schema's maximum, which
    # on the local backend (these services') is the backend's cap for this machine.
    from airflow_tfk.spec.capacity import local_max_tasks

    assert fill(driver, "workers", "700").get_attribute("value") == str(local_max_tasks())
    # Against the pattern: submitting is refused with the field's name, and no run exists.
    fill(driver, "image", "bad image{")
    submit(driver)
    driver.find_element(By.XPATH, "//*[contains(., 'Invalid input for param image')]")
    shot(driver, "02-invalid-value-refused")
    assert runs(services) == []

    # Valid values, TensorBoard ticked: the run is created from exactly what was typed.
    open_form(driver, services)
    fill(driver, "workers", "1")
    fill(driver, "ps", "1")
    fill(driver, "steps", "40")
    fill(driver, "image", "registry.example/any-image:1")  # ignored by the local backend
    fill(driver, "ps_grace_seconds", "0")  # nothing here needs the PS after success
    box = driver.find_element(By.NAME, "element_tensorboard")
    driver.execute_script("arguments[0].click()", box)  # the switch's input is visually hidden
    assert box.is_selected()
    shot(driver, "03-valid-values")
    submit(driver)
    run = wait_for("the run to be created", lambda: runs(services), 60, services)[0]
    assert run["conf"] == {
        "workers": 1,
        "ps": 1,
        "steps": 40,
        "image": "registry.example/any-image:1",
        "mode": "parameter_server",
        "ps_grace_seconds": 0,
        "tensorboard": True,
    }
    run_id = run["dag_run_id"]
    assert run["triggered_by"] == "ui"

    state = wait_for(
        "the run to finish",
        lambda: (
            (s := api(services, f"/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id)}")["state"])
            in ("success", "failed")
            and s
        ),
        600,
        services,
        every=1,
    )
    quoted = urllib.parse.quote(run_id)
    driver.get(f"{services.url}/dags/{DAG_ID}/runs/{quoted}")
    driver.find_element(By.XPATH, "//*[normalize-space()='Success' or normalize-space()='Failed']")
    shot(driver, "04-run-finished")
    tis = {
        t["task_id"]: t["state"]
        for t in api(services, f"/dags/{DAG_ID}/dagRuns/{quoted}/taskInstances")["task_instances"]
    }
    assert state == "success", f"run {run_id} ended {state}: {tis}; logs in {ARTIFACTS}"
    assert tis == {
        "validate": "success",
        "tensorboard_wanted": "success",
        "tensorboard": "success",
        "train": "success",
    }

    # The train task's TensorBoard button leads to a TensorBoard that answers.
    driver.get(f"{services.url}/dags/{DAG_ID}/runs/{quoted}/tasks/train")
    # Airflow's UI lists a task's extra links on its Details tab.
    driver.find_element(By.XPATH, "//*[(self::a or self::button) and normalize-space()='Details']").click()
    link = driver.find_element(By.XPATH, "//a[normalize-space()='TensorBoard']")
    href = link.get_attribute("href")
    shot(driver, "05-train-task-tensorboard-link")
    assert href.startswith("http://127.0.0.1:"), href
    with urllib.request.urlopen(href, timeout=60) as resp:
        assert resp.status == 200 and b"TensorBoard" in resp.read()
    driver.get(href)
    # TensorBoard draws its dashboards after the page loads; wait for its tab bar or its
    # "no data" notice so the screenshot shows the board, not a blank frame.
    driver.find_element(
        By.XPATH,
        "//*[contains(text(), 'Time Series') or contains(text(), 'Scalars')"
        " or contains(text(), 'No dashboards')]",
    )
    shot(driver, "06-tensorboard")
    # The training's own log says what the local backend did with the image.
    log = "\n".join(
        p.read_text(errors="replace") for p in services.base.glob("home/logs/dag_id=*/**/task_id=train/*.log")
    )
    assert "ignoring image registry.example/any-image:1" in log
