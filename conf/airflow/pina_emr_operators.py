"""The Airflow side of the pina-spark DAGs (pina_emr_steps.emr_dag builds them): the Amazon
provider's EMR operators with two changes, and the imports that differ between Airflow 2.9+ and
Airflow 3.

- :class:`EmrClusterOperator` sends no ``Ec2SubnetId`` when its template rendered empty (the
  ``pina_subnet`` Variable unset), instead of an empty one EMR refuses.
- :class:`EmrStageOperator` adds one stage's step and watches it: a retry of the task adds the
  step again (retrying a sensor would only look at the same failed step again), and a failure
  names the stage, the step and EMR's reason for it. A task killed by its ``execution_timeout``
  (or by hand) cancels the step it is watching.
"""

from airflow.exceptions import AirflowException
from airflow.providers.amazon.aws.hooks.emr import EmrHook
from airflow.providers.amazon.aws.operators.emr import (
    EmrAddStepsOperator,
    EmrCreateJobFlowOperator,
    EmrTerminateJobFlowOperator,
)
from airflow.providers.amazon.aws.utils.waiter_with_logging import wait
from pina_emr_steps import without_empty_subnet

try:  # Airflow 3
    from airflow.sdk import DAG, CronDataIntervalTimetable, Param
except ImportError:  # Airflow 2.9 - 2.11
    from airflow import DAG  # type: ignore[no-redef]
    from airflow.models.param import Param  # type: ignore[no-redef]
    from airflow.timetables.interval import (  # type: ignore[no-redef]
        CronDataIntervalTimetable,
    )

__all__ = [
    "DAG",
    "CronDataIntervalTimetable",
    "Param",
    "EmrClusterOperator",
    "EmrStageOperator",
    "EmrTerminateJobFlowOperator",
]


class EmrClusterOperator(EmrCreateJobFlowOperator):
    """``EmrCreateJobFlowOperator`` that leaves ``Instances.Ec2SubnetId`` out when it rendered
    empty, and sends ``job_flow_overrides`` alone (no ``emr_conn_id``: the extra of Airflow's
    default ``emr_default`` connection would add its example job flow's keys)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("emr_conn_id", None)
        super().__init__(**kwargs)

    def execute(self, context):
        if isinstance(self.job_flow_overrides, dict):
            self.job_flow_overrides = without_empty_subnet(self.job_flow_overrides)
        return super().execute(context)


class EmrStageOperator(EmrAddStepsOperator):
    """Add the step of one pipeline stage and wait until it ends (every ``waiter_delay`` seconds,
    at most ``waiter_max_attempts`` looks). Fails naming the stage when the step ends in any
    state but ``COMPLETED``."""

    def __init__(self, *, stage: str, **kwargs):
        kwargs["wait_for_completion"] = False  # the watching is done here, to name the stage
        # never deferred (``[operators] default_deferrable``): the parent's execute would raise
        # TaskDeferred right after adding the step, skipping the watching below and on_kill
        kwargs["deferrable"] = False
        super().__init__(**kwargs)
        self.stage = stage
        self._watching: list[str] = []  # the steps on_kill cancels

    def _hook(self):
        # the provider's operators have a hook attribute since 9.x's AwsBaseOperator
        return getattr(self, "hook", None) or EmrHook(aws_conn_id=self.aws_conn_id)

    def _client(self):
        return self._hook().conn

    def execute(self, context):
        step_ids = super().execute(context)
        self._watching = list(step_ids)
        client = self._client()
        # the provider's waiter: it ends on every terminal state, INTERRUPTED included
        # (botocore's step_complete does not, and would poll until the stage timeout)
        waiter = self._hook().get_waiter("step_wait_for_terminal")
        for step_id in step_ids:
            try:
                wait(
                    waiter=waiter,
                    waiter_delay=self.waiter_delay,
                    waiter_max_attempts=self.waiter_max_attempts,
                    args={"ClusterId": self.job_flow_id, "StepId": step_id},
                    failure_message=f"stage {self.stage}: EMR step {step_id} failed",
                    status_message=f"stage {self.stage}: EMR step {step_id} is",
                    status_args=["Step.Status.State", "Step.Status.StateChangeReason"],
                )
            except AirflowException as exc:
                step = client.describe_step(ClusterId=self.job_flow_id, StepId=step_id)["Step"]
                raise AirflowException(step_failure(self.stage, step, str(exc))) from exc
        self._watching = []
        self.log.info("stage %s: EMR steps %s completed", self.stage, step_ids)
        return step_ids

    def on_kill(self):
        """Cancel the step being watched (Airflow calls this when the task passes its
        ``execution_timeout`` or is killed): a running step's process is terminated, so the
        stage stops instead of running on beside a retry. In cluster deploy mode the Spark
        driver is a YARN application that may outlive its step until the cluster is
        terminated (the DAG's teardown)."""
        if not self._watching:
            return
        self.log.warning("stage %s: cancelling EMR steps %s", self.stage, self._watching)
        try:
            self._client().cancel_steps(
                ClusterId=self.job_flow_id,
                StepIds=self._watching,
                StepCancellationOption="TERMINATE_PROCESS",
            )
        except Exception as exc:  # the task fails anyway; say why the step may still run
            self.log.error("stage %s: cannot cancel %s: %s", self.stage, self._watching, exc)


def step_failure(stage: str, step: dict, error: str = "") -> str:
    """One line naming the failed stage, its step, the step's state and EMR's failure details
    (reason, message, log file) where EMR gives them.

    >>> step_failure("embed", {"Id": "s-1", "Name": "n", "Status": {"State": "FAILED",
    ...     "FailureDetails": {"Reason": "Step failed.", "Message": "rc 1"}}})
    'pina-spark stage embed failed: EMR step s-1 (n) is FAILED: reason: Step failed.; message: rc 1'
    """
    status = step.get("Status", {})
    details = status.get("FailureDetails") or {}
    head = (
        f"pina-spark stage {stage} failed: EMR step {step.get('Id', '?')} "
        f"({step.get('Name', '')}) is {status.get('State', '?')}"
    )
    parts = [
        f"{k.lower()}: {details[k]}" for k in ("Reason", "Message", "LogFile") if details.get(k)
    ]
    if not parts and error:
        parts = [error]
    return head + (": " + "; ".join(parts) if parts else "")
