"""The fault run's checker (tests/reliability/fault_history.py) finds each kind of
violation in a history made up to hold it, and none in a history that holds none."""

from __future__ import annotations

from tests.reliability.fault_history import (
    Fault,
    Held,
    History,
    JobRow,
    Refusal,
    Run,
    check,
    explain,
)

WORKER_A, WORKER_B = 100, 200


def run(job=1, attempt=1, worker=WORKER_A, pid=None, claimed=10.0, started=None, ended=11.0):
    return Run(job, attempt, worker, pid or worker, claimed, started or claimed + 0.01, ended)


def history(jobs, runs, faults=(), refusals=(), exits=()):
    return History(
        origin=0.0,
        lease=6.0,
        poll_interval=0.5,
        jobs=list(jobs),
        runs=list(runs),
        faults=list(faults),
        concurrency=2,
        refusals=list(refusals),
        unexpected_exits=list(exits),
    )


def succeeded(job=1, attempts=1):
    return JobRow(job, "succeeded", attempts, "")


def invariants(found):
    return sorted({violation.invariant for violation in found})


def test_a_clean_history_has_no_violation():
    killed = run(attempt=1, ended=None, claimed=10.0)
    again = run(attempt=2, worker=WORKER_B, claimed=17.0, ended=18.0)
    kill = Fault(12.0, "kill_worker", WORKER_A, held=(Held(1, 1, 16.5),))
    assert check(history([succeeded(attempts=2)], [killed, again], [kill])) == []


def test_a_job_left_running_or_pending():
    found = check(history([JobRow(1, "running", 1, ""), JobRow(2, "pending", 0, "")], []))
    assert invariants(found) == [1] and len(found) == 2


def test_a_success_without_a_complete_run_and_an_attempt_run_twice():
    assert invariants(check(history([succeeded(attempts=1)], [run(ended=None)]))) == [2, 3]
    twice = [run(), run(worker=WORKER_B, claimed=12.0, ended=13.0)]
    assert 2 in invariants(check(history([succeeded()], twice)))


def test_a_second_run_while_the_first_still_runs_on_a_live_worker():
    first = run(attempt=1, claimed=10.0, ended=20.0)
    second = run(attempt=2, worker=WORKER_B, claimed=15.0, ended=16.0)
    found = check(history([succeeded(attempts=2)], [first, second]))
    assert invariants(found) == [3]
    assert "before attempt 1 ended" in explain(found[0], history([], []))


def test_a_second_run_while_the_first_worker_is_stopped_is_allowed():
    first = run(attempt=1, claimed=10.0, ended=20.0)
    second = run(attempt=2, worker=WORKER_B, claimed=17.0, ended=18.0)
    stop = Fault(11.0, "stop_worker", WORKER_A, until=19.0, held=(Held(1, 1, 16.5),))
    assert check(history([succeeded(attempts=2)], [first, second], [stop])) == []


def test_a_run_that_never_ended_and_that_no_fault_killed():
    found = check(history([succeeded(attempts=2)], [run(ended=None), run(attempt=2, claimed=30)]))
    assert invariants(found) == [3]


def test_a_failed_job():
    found = check(
        history([JobRow(1, "failed", 41, "OperationalError: the connection is closed")], [])
    )
    assert invariants(found) == [4]
    assert "the connection is closed" in found[0].text


def test_dead_connections_met_again_and_again_after_one_cut():
    cut = Fault(10.0, "cut_sessions")
    refusals = [Refusal(job, 1, WORKER_A, 12.0 + job, "OperationalError") for job in range(1, 6)]
    jobs = [succeeded(job, 2) for job in range(1, 6)]
    runs = [run(job, 2, claimed=20.0 + job, ended=20.5 + job) for job in range(1, 6)]
    found = check(history(jobs, runs, [cut], refusals))
    assert invariants(found) == [4]
    assert "not renewed" in found[0].text
    # once per slot (2) and once more is what Django's own rule gives: no violation
    assert check(history(jobs, runs, [cut], refusals[:3])) == []


def test_refusals_while_the_server_restarts_are_explained():
    restart = Fault(10.0, "restart_server", until=11.0)
    refusals = [Refusal(job, 1, WORKER_A, 10.5, "OperationalError") for job in range(1, 6)]
    jobs = [succeeded(job, 2) for job in range(1, 6)]
    runs = [run(job, 2, claimed=20.0 + job, ended=20.5 + job) for job in range(1, 6)]
    assert check(history(jobs, runs, [restart], refusals)) == []


def test_a_refusal_before_any_database_fault():
    found = check(
        history([succeeded(attempts=2)], [run(attempt=2)], [], [Refusal(1, 1, 1, 5.0, "X")])
    )
    assert invariants(found) == [4]


def test_a_held_job_that_comes_back_late_or_never():
    late = run(attempt=2, worker=WORKER_B, claimed=40.0, ended=41.0)
    kill = Fault(12.0, "kill_worker", WORKER_A, held=(Held(1, 1, 16.5),))
    found = check(history([succeeded(attempts=2)], [run(ended=None), late], [kill]))
    assert invariants(found) == [5]
    never = Fault(12.0, "kill_worker", WORKER_A, held=(Held(2, 1, 16.5),))
    found = check(history([JobRow(2, "pending", 1, "")], [], [never]))
    assert invariants(found) == [1, 5]


def test_a_worker_that_exits_by_itself():
    assert invariants(check(history([], [], exits=[(WORKER_A, 1)]))) == [6]


def test_a_database_fault_while_a_held_job_waits_adds_its_outage_and_the_backoff():
    kill = Fault(12.0, "kill_worker", WORKER_A, held=(Held(1, 1, 16.5),))
    restart = Fault(16.0, "restart_server", until=16.5)
    back = run(attempt=2, worker=WORKER_B, claimed=31.0, ended=32.0)
    assert check(history([succeeded(attempts=2)], [run(ended=None), back], [kill])) != []
    assert check(history([succeeded(attempts=2)], [run(ended=None), back], [kill, restart])) == []


def test_a_child_that_goes_on_after_its_stopped_worker_resumes():
    child = 150
    first = run(attempt=1, pid=child, claimed=10.0, ended=30.0)
    second = run(attempt=2, worker=WORKER_B, claimed=17.0, ended=18.0)
    stop = Fault(11.0, "stop_parent", WORKER_A, until=19.0, held=(Held(1, 1, 16.5),))
    found = check(history([succeeded(attempts=2)], [first, second], [stop]))
    assert invariants(found) == [3]
    assert "went on with attempt 1" in found[0].text
    killed_on_resume = run(attempt=1, pid=child, claimed=10.0, ended=None)
    assert check(history([succeeded(attempts=2)], [killed_on_resume, second], [stop])) == []


def test_a_run_whose_parent_process_was_killed_ended_with_it():
    forker, child = 110, 150
    first = run(attempt=1, pid=child, claimed=10.0, ended=None)
    second = run(attempt=2, worker=WORKER_B, claimed=13.0, ended=14.0)
    kill = Fault(12.0, "kill_child", forker, descendants=(child,))
    assert check(history([succeeded(attempts=2)], [first, second], [kill])) == []


def test_a_thread_of_a_worker_that_died():
    dead = history([], [])
    dead.dead_threads = ["Exception in thread cronqueue-slot-2:"]
    assert invariants(check(dead)) == [6]


def test_a_threads_handler_finishing_after_its_stopped_worker_resumed_is_allowed():
    first = run(attempt=1, claimed=10.0, ended=19.2)  # the worker resumes at 19.0
    second = run(attempt=2, worker=WORKER_B, claimed=19.1, ended=20.0)
    stop = Fault(11.0, "stop_worker", WORKER_A, until=19.0, held=(Held(1, 1, 16.5),))
    assert check(history([succeeded(attempts=2)], [first, second], [stop])) == []


def test_a_handler_that_began_after_its_row_moved_on_counts_from_its_start():
    late = run(attempt=1, claimed=None, started=20.0, ended=20.5)  # its worker was stopped
    second = run(attempt=2, worker=WORKER_B, claimed=17.0, ended=18.0)
    stop = Fault(11.0, "stop_worker", WORKER_A, until=19.9, held=(Held(1, 1, 16.5),))
    assert check(history([succeeded(attempts=2)], [late, second], [stop])) == []


def test_a_held_job_made_pending_in_time_came_back_however_late_its_next_claim():
    late = run(attempt=2, worker=WORKER_B, claimed=40.0, ended=41.0)  # behind a backlog
    kill = Fault(12.0, "kill_worker", WORKER_A, held=(Held(1, 1, 16.5),))
    found = history([succeeded(attempts=2)], [run(ended=None), late], [kill])
    assert invariants(check(found)) == [5]
    found.recoveries = {(1, 1): 17.0}
    assert check(found) == []


def test_a_child_its_worker_killed_as_the_lease_ran_out_ended_then():
    child = 150
    killed = run(attempt=1, pid=child, claimed=10.0, ended=None)
    again = run(attempt=2, worker=WORKER_B, claimed=17.0, ended=18.0)
    found = history([succeeded(attempts=2)], [killed, again])
    assert invariants(check(found)) == [3]
    found.lease_kills = {child}
    assert check(found) == []
