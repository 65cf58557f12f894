//! Engine bugs the simulation found, worked around until they are fixed. Each has a switch in
//! [`KnownBugs`](super::KnownBugs), on in every generated run; the ignored tests of
//! `tests/tests/simulation.rs` turn it off and reproduce the bug
//! (`known_bug_seeds_pass_without_their_workarounds` replays the seed that found each).
//! Fixing one: turn its switch off in [`KnownBugs::default`](super::KnownBugs), run the
//! ignored tests and the sweep, then remove the workaround.

/// **Fixed engine bug** (found by seeds 89 and 257) (fixed with the simulation's first multi-round
/// sweep; its switch is off and its test is a regression test): `Delegator::on_round_done` takes any
/// `round_done` that arrives while the delegation is `running` as the end of the running
/// round, without comparing its `round` with the delegation's. An executor replays the last
/// round's `snapshot` and `round_done` to a stream that joins while the assignment is idle
/// (after a cut, or a delegator restart). When that replay reaches a delegator that already
/// sent CONTINUE for round k + 1 (sent just before the replay arrived; or lost, or still in
/// flight, while the stream reconnected), round k's `round_done` ends round k + 1 before it
/// ran: the delegation goes idle at round k + 1 with round k's result. What follows depends on
/// the CONTINUE: if it reached the executor, round k + 1 runs there, its `round_done` is
/// ignored by the idle delegator, and the next CONTINUE and a CLOSE are refused while it runs;
/// if it was lost, the next CONTINUE (round k + 2) runs as round k + 2 with no round k + 1.
/// The fix: ignore a `round_done` whose `round` is below the delegation's.
///
/// Until it is fixed ([`KnownBugs::stale_round_done`](super::KnownBugs::stale_round_done)),
/// the simulated application does not continue a delegation while its open stream has not
/// been subscribed or still has events in flight (which avoids the first trigger), and a
/// delegation a stale `round_done` reached anyway (counter "stale round_done reached a running
/// delegation (known bug)", in under 1 % of the seeds) is exempt from the round checks its
/// consequences break: those made when a round settles, that an executor runs the rounds in
/// order with their history, and that a CLOSE never reaches an executor running a round.
/// Reproduced by `known_bug_a_replayed_round_done_ends_the_next_round`.
pub const KNOWN_BUG_STALE_ROUND_DONE: &str =
    "a replayed round_done of round k ends round k + 1 before it ran (Delegator::on_round_done)";

/// **Fixed engine bug** (found by seed 2852) (fixed with the simulation's first multi-round
/// sweep; its switch is off and its test is a regression test): an executor takes a CONTINUE that arrives while
/// the assignment is idle as the next round whatever its `round` says
/// (`Executor::on_continue`: `round = max(c.round, round + 1)`), and recognises a repeated
/// CONTINUE only while the round it started still runs. A duplicate of the CONTINUE of round k
/// (a request delivered twice) that arrives after round k ended starts an extra round k + 1
/// nobody asked for, with round k's prompt; the application's real CONTINUE of round k + 1
/// then finds that round running and is answered as a repeat, so its prompt never runs, and
/// the round's result is that of a repeated prompt. The fix: answer a CONTINUE whose `round`
/// is not above the assignment's as a repeat (nothing started).
///
/// Until it is fixed
/// ([`KnownBugs::late_duplicate_continue`](super::KnownBugs::late_duplicate_continue))
/// CONTINUE requests are never duplicated. Reproduced by
/// `known_bug_a_late_duplicate_continue_starts_an_extra_round`.
pub const KNOWN_BUG_LATE_DUPLICATE_CONTINUE: &str =
    "a duplicate CONTINUE arriving after its round ended starts an extra round (Executor::on_continue)";

/// **Fixed engine bug** (found by seed 17848) (fixed with the simulation's first multi-round
/// sweep; its switch is off and its test is a regression test): a delegator restarted while a kept-open
/// delegation is idle and the round's snapshot is still being stored forgets that snapshot
/// (`Delegator::restore` drops an in-flight snapshot whose bytes are not stored, to be
/// "received again": for `completed` it awaits it, for `idle` it relies on the executor's
/// replay), and `Delegator::round_settled` says the round settled at once, before the replay
/// arrives (or when it never does: the executor is down, or closes first). An application
/// that closes then loses the round's result (never stored nor applied); one that continues
/// gets the replay during the next round ([`KNOWN_BUG_STALE_ROUND_DONE`]). WIRE.md §17.7: a
/// round counts as settled only once its snapshot is stored and, in `auto` mode, applied. The
/// fix: keep such a snapshot awaited while idle (not settled) until it is received again.
///
/// Until it is fixed
/// ([`KnownBugs::restored_idle_settled`](super::KnownBugs::restored_idle_settled)) the
/// simulated application decides nothing while the delegation's open stream has not been
/// subscribed or still has events in flight (so the replay arrives first when the executor is
/// up), and a settled round whose snapshot a restart forgot is counted ("settled round's
/// snapshot forgotten by a restart (known bug)"), not reported.
pub const KNOWN_BUG_RESTORED_IDLE_SETTLED: &str =
    "a delegator restarted while an idle round's snapshot was being stored says the round \
     settled before the snapshot is received again (Delegator::restore, round_settled)";

/// **Fixed engine bug** (fixed by journalling the snapshot whose apply runs, `applying` in
/// the record; `restart_tests::a_restart_mid_apply_marks_the_running_apply_not_the_queued_one`)
/// (found by seed 4402, once rounds gave delegations several snapshots):
/// a delegator restarted in the middle of an apply attributes the finished apply to the wrong
/// snapshot when another apply of the same delegation was queued behind it.
/// `Delegator::apply_snapshot` marks a snapshot `in_flight` (and journals it so) when its apply
/// is queued, not only when it starts; `Delegator::restore` assumes "at most one apply per
/// delegation is in flight" and gives [`ApplyRecovery::Finished`] to the first `in_flight`
/// stored snapshot in record order. When the application applied a later snapshot first (say
/// round 3's, then round 1's), the restored record says round 1's result is applied (it never
/// was) and round 3's (which the workspace holds) is pending after an interrupted apply. The
/// fix: journal which snapshot the running apply writes (or keep queued ones `pending` until
/// their apply starts, or have the recovery name the snapshot).
///
/// Until it is fixed
/// ([`KnownBugs::queued_apply_recovery`](super::KnownBugs::queued_apply_recovery)) the
/// simulated application applies a staged snapshot only while no other snapshot of the
/// delegation is in flight. The invariant that finds it: the snapshots the delegator records
/// `applied` are exactly those whose apply wrote the workspace.
///
/// [`ApplyRecovery::Finished`]: awcp_proto::engine::delegator::ApplyRecovery::Finished
pub const KNOWN_BUG_QUEUED_APPLY_RECOVERY: &str =
    "a restart during an apply with another queued marks the first in-flight snapshot applied, \
     not the one written (Delegator::restore)";
