"""The submission token, the classification of sbatch's failures and the adopt-or-submit-again decision, without a
cluster: sbatch and squeue are test doubles here (named so); the sandbox tests run the real ones
(tests/verbs/test_submit_lost_answer_sandbox.py)."""

from __future__ import annotations

import re
import shlex

import pytest

from beam_slurm.slurm import submission
from beam_slurm.slurm.scheduler import SlurmCommandError
from beam_slurm.slurm.submission import (
    SbatchAnswer,
    SbatchRequest,
    SubmissionUnknown,
    after_lost_answer,
    comment_tokens,
    find_token,
    is_transport_error,
    submission_token,
    token_prefix,
)


def test_token_is_short_shell_safe_and_names_its_run_and_stage():
    token = submission_token("beam_lora_16gpu-precision_bf16-rank_0", "train")
    assert re.fullmatch(r"beam-slurm:beam_lora_16gpu-precision_bf16-rank_0:train:[0-9a-f]{12}", token), token
    assert shlex.quote(token) == token  # nothing a shell would read differently
    assert token.startswith(token_prefix("beam_lora_16gpu-precision_bf16-rank_0", "train"))
    assert submission_token("a", "train") != submission_token("a", "train")  # one per submission
    # With the stage's output (its identity), the same output shares a longer prefix, another output does not.
    ckpt_a, ckpt_b = submission_token("r", "train", "train:/c/a"), submission_token("r", "train", "train:/c/b")
    assert re.fullmatch(r"beam-slurm:r:train:[0-9a-f]{12}", ckpt_a), ckpt_a
    assert ckpt_a.startswith(token_prefix("r", "train", "train:/c/a"))
    assert not ckpt_b.startswith(token_prefix("r", "train", "train:/c/a")) and ckpt_b.startswith(
        token_prefix("r", "train")
    )
    odd = submission_token("my run; rm -rf /'x" + "y" * 100, "eval-step10")
    assert shlex.quote(odd) == odd and len(odd) < 110 and ":eval-step10:" in odd, odd


def test_the_token_goes_into_one_comment_after_the_users_own(tmp_path):
    request = SbatchRequest(script="/s.sh", options=["--nodes=1", "--comment=team x"], token="beam-slurm:r:train:ab")
    argv = request.argv()
    assert [a for a in argv if a.startswith("--comment")] == ["--comment=team x beam-slurm:r:train:ab"], argv
    request = SbatchRequest(script="/s.sh", options=["--comment", "mine", "--nodes=1"], token="beam-slurm:r:data:cd")
    assert request.argv().count("mine") == 0 and "--comment=mine beam-slurm:r:data:cd" in request.argv()
    assert "--nodes=1" in request.argv()
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --comment=from-header\n#SBATCH --nodes=1\necho hi\n")
    argv = SbatchRequest(script=str(script), token="beam-slurm:r:train:ef").argv()
    assert "--comment=from-header beam-slurm:r:train:ef" in argv  # the command line wins over the header: kept both
    assert comment_tokens("from-header beam-slurm:r:train:ef") == ["beam-slurm:r:train:ef"]
    assert "--comment" not in " ".join(SbatchRequest(script="/s.sh").argv())  # no token yet: nothing added


@pytest.mark.parametrize(
    ("text", "lost"),
    [
        ("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation", True),
        ("sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received", True),
        ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", True),
        ("sbatch: error: slurm_receive_msg: Connection refused", True),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", False),
        ("sbatch: error: Batch job submission failed: Requested node configuration is not available", False),
        ("sbatch: error: invalid dependency", False),
    ],
)
def test_transport_errors_are_told_from_refusals(text, lost):
    assert is_transport_error(text) is lost


@pytest.mark.parametrize(
    ("found", "submissions", "action", "job", "extra"),
    [
        (["41"], 1, "adopt", "41", ()),  # the controller created it before the answer was lost
        (["41", "44"], 2, "adopt", "41", ("44",)),  # two lost calls both landed: keep one, cancel the other
        ([], 1, "submit", "", ()),  # nothing was created: submit again
        ([], submission.MAX_SUBMISSIONS, "unknown", "", ()),  # every call lost and nothing shown: give up
        (None, 1, "unknown", "", ()),  # Slurm never answered: cannot know, never guess
    ],
)
def test_adopt_or_submit_again(found, submissions, action, job, extra):
    decision = after_lost_answer(found, submissions)
    assert (decision.action, decision.job_id, decision.extra) == (action, job, extra)


class Clock:
    """A test double for time: sleep advances it."""

    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


class SqueueDouble:
    """A test double for squeue's token lookup: fails (controller down) `down` times, then answers from `jobs`."""

    def __init__(self, jobs: dict[str, list[str]] | None = None, down: int = 0, later: dict | None = None):
        self.jobs, self.down, self.calls, self.later = jobs or {}, down, 0, later or {}

    def __call__(self, token: str) -> list[str]:
        self.calls += 1
        if self.calls <= self.down:
            raise SlurmCommandError("squeue: error: Socket timed out on send/recv operation")
        if self.calls in self.later:
            self.jobs = self.later[self.calls]
        return list(self.jobs.get(token, []))


class SbatchDouble:
    """A test double for sbatch: answers in turn from `answers`; records each command line."""

    def __init__(self, *answers: SbatchAnswer):
        self.answers, self.argvs = list(answers), []

    def __call__(self, argv: list[str]) -> SbatchAnswer:
        self.argvs.append(argv)
        return self.answers.pop(0)


LOST = SbatchAnswer("", True, "failed (1): sbatch: error: Socket timed out on send/recv operation")


def test_find_token_waits_while_slurm_is_down_and_gives_up_when_bounded():
    clock = Clock()
    assert find_token("t", SqueueDouble({"t": ["7"]}, down=5), wait_s=60, sleep=clock.sleep, clock=clock) == ["7"]
    clock = Clock()
    assert find_token("t", SqueueDouble(down=10**6), wait_s=30, sleep=clock.sleep, clock=clock) is None
    assert clock.now >= 30
    # An empty first answer is asked once more: the job of a request read late shows up a moment later.
    late = SqueueDouble(later={2: {"t": ["9"]}})
    clock = Clock()
    assert find_token("t", late, wait_s=30, sleep=clock.sleep, clock=clock) == ["9"] and late.calls == 2



def test_find_token_asks_a_controller_that_refuses_connections_for_seconds_only():
    """Nothing listens (down, not busy): DOWN_WAIT_S, not the whole wait; a controller that times out (stopped,
    busy) is waited for as long as wait_s allows."""
    from beam_slurm.slurm.outage import CONTROLLER
    from beam_slurm.slurm.scheduler import SlurmUnreachable

    def refusing(text):
        def find(token):
            raise SlurmUnreachable(text, CONTROLLER)
        return find

    clock = Clock()
    refused = "squeue: error: Unable to contact slurm controller (connect failure)"
    assert find_token("t", refusing(refused), wait_s=180, sleep=clock.sleep, clock=clock) is None
    assert submission.DOWN_WAIT_S <= clock.now < submission.DOWN_WAIT_S + submission.ASK_AGAIN_S + 1
    clock = Clock()
    timed_out = "squeue: error: Socket timed out on send/recv operation"
    assert find_token("t", refusing(timed_out), wait_s=180, sleep=clock.sleep, clock=clock) is None
    assert clock.now >= 180

def run_submit(sbatch: SbatchDouble, squeue: SqueueDouble, cancelled: list | None = None, **kwargs):
    clock, notes = Clock(), []
    request = SbatchRequest(script="/s/train.sh", token="beam-slurm:r:train:0123456789ab")
    job = submission.submit(
        request,
        run=sbatch,
        find=squeue,
        cancel=lambda *ids: (cancelled if cancelled is not None else []).extend(ids),
        sleep=clock.sleep,
        clock=clock,
        notify=notes.append,
        **kwargs,
    )
    return job, notes


def test_a_lost_answer_with_the_job_created_adopts_it():
    sbatch = SbatchDouble(LOST)
    job, notes = run_submit(sbatch, SqueueDouble({"beam-slurm:r:train:0123456789ab": ["41"]}, down=3))
    assert job == "41" and len(sbatch.argvs) == 1
    assert any("job 41" in n and "adopted" in n for n in notes), notes
    assert "--comment=beam-slurm:r:train:0123456789ab" in sbatch.argvs[0]


def test_a_lost_answer_without_a_job_submits_again_with_the_same_token():
    sbatch = SbatchDouble(LOST, SbatchAnswer("42", False, ""))
    cancelled: list[str] = []
    job, notes = run_submit(sbatch, SqueueDouble(), cancelled)
    assert job == "42" and len(sbatch.argvs) == 2 and sbatch.argvs[0] == sbatch.argvs[1] and cancelled == []


def test_a_late_job_of_the_first_call_is_cancelled_after_the_second_lands():
    token = "beam-slurm:r:train:0123456789ab"
    sbatch = SbatchDouble(LOST, SbatchAnswer("43", False, ""))
    squeue = SqueueDouble(later={3: {token: ["43", "44"]}})  # the first call's job appears after the second
    cancelled: list[str] = []
    job, notes = run_submit(sbatch, squeue, cancelled)
    assert job == "43" and cancelled == ["44"], notes


def test_a_refusal_is_raised_at_once_and_never_retried():
    sbatch = SbatchDouble(SbatchAnswer("", False, "failed (1): Invalid partition name specified"))
    squeue = SqueueDouble()
    with pytest.raises(SlurmCommandError, match="Invalid partition") as caught:
        run_submit(sbatch, squeue)
    assert not isinstance(caught.value, SubmissionUnknown) and len(sbatch.argvs) == 1 and squeue.calls == 0


def test_slurm_silent_past_the_bound_is_unknown_and_names_the_token():
    sbatch = SbatchDouble(LOST)
    with pytest.raises(SubmissionUnknown, match="beam-slurm:r:train:0123456789ab") as caught:
        run_submit(sbatch, SqueueDouble(down=10**6), wait_s=40)
    assert caught.value.token == "beam-slurm:r:train:0123456789ab" and len(sbatch.argvs) == 1
