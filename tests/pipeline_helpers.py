"""Helpers for the pipeline tests: a local Spark session with the logbus source, a deliver subprocess, lake reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path



def spark_session():
    from pyspark.sql import SparkSession

    from logbus.pipeline import prepare_spark_environment
    from logbus.pipeline.source import register

    prepare_spark_environment()
    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("logbus-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


class DeliverProcess:
    """`logbus deliver` as a real subprocess; kill() is SIGKILL."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.user_args = list(args)
        self.args = [sys.executable, "-m", "logbus.cli", "deliver", "--master", "local[2,4]", *args]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> "DeliverProcess":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"logbus deliver did not finish within {timeout}s:\n{self.log()[-4000:]}")

    def kill(self) -> None:
        """SIGKILL the job and everything it started (the Spark JVM and its Python workers)."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        elif self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # workers left behind by an exited job
            except ProcessLookupError:
                pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for(self, text: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log().count(text) >= count:
                return
            if self.proc and self.proc.poll() is not None:
                raise AssertionError(f"logbus deliver exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            time.sleep(0.2)
        raise AssertionError(f"{text!r} did not appear {count} time(s) within {timeout}s:\n{self.log()[-4000:]}")
