"""One pool's zero-copy bookkeeping (:class:`ZeroCopy`) and everything that moves its state, each on the device with
no host synchronisation:

* ``accepted[row]`` (int32, one entry per scratch row): how many tokens the row's last verify accepted; the live SSM
  state of a request is scratch ``[row, accepted[row] - 1]``. The rows are the requests' ``req_pool_idx`` (row 0:
  padding, the discard row);
* per verify forward, once (at the first linear layer, inside the verify's CUDA graph where there is one): the rows
  and seeds every layer reads (:meth:`ZeroCopy.verify_tables`, one launch of :mod:`~sglang_mamba_dedup.kernels.seed_index`);
* per extend, once (after the last linear layer): the stage-in of every layer, ``scratch[:, row, 0] =
  temporal[:, slot]`` (one launch of the commit kernel) and ``accepted[row] = 1``;
* per commit: the conv windows from the requests' rows, with ``accepted[row] = step + 1`` stored by the same launch,
  and with the radix cache on the tracked states (SSM and conv) into their track slots, still one launch
  (:meth:`ZeroCopy.commit`, the committer a route binds where the pool's gate took zero-copy);
* per streaming-session hand-off: the live state materialized into ``temporal[slot]`` (Z6).

The kernels are imported by name, once, with this module: it is imported only where a pool's gate passed (the
gate needs our commit kernel on the pool: :func:`~sglang_mamba_dedup.patches.commit.kernel_problem`) and by tests.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sglang_mamba_dedup import report, state
from sglang_mamba_dedup.kernels import descriptor, seed_index, state_commit

from . import prepare


class VerifyTables(NamedTuple):
    """What every linear layer of one zero-copy verify forward reads."""

    zc: ZeroCopy
    rows: Any  # int32 [n]: the scratch row each entry writes (req_pool_idx; padding: 0)
    seeds: Any  # [n], the slots' dtype: the entry's live state in the scratch viewed [rows * pitch, ...]; padding: -1


class ZeroCopy:
    """One pool's zero-copy bookkeeping: its scratch pitch, first/last linear layer ids and the ``accepted`` table,
    which lives in the pool's :class:`~sglang_mamba_dedup.state.PoolState` (:func:`.prepare`, normally at pool build)."""

    def __init__(self, pool, layers: tuple[int, int] = (0, 0), radix: str | None = None) -> None:
        self.pool = pool
        #: the mamba radix-cache strategy the gate passed with the radix cache on (``extra_buffer``, ...), None with it
        #: off: what the log line and ``/get_server_info`` say (commits then take track sets)
        self.radix = radix
        self.pool_state = state.pool_state(pool)
        prepare(pool)  # made at pool build already, unless the pool was built before zero-copy was asked for
        self.pitch = pool.mamba_cache.intermediate_ssm.shape[2]  # the allocated draft-step pitch of a scratch row
        self.layers = layers  # (first, last) linear layer id of a forward: where tables are built / stage-ins run
        self.handoffs: list = []  # (row, slot tensor) of streaming-session turns kept, to materialize (Z6)
        self.tables: VerifyTables | None = None
        self._tables_of: tuple = ()
        self._zeros: Any = None  # int32 zeros, one per scratch row: the stage-in's steps

    @property
    def accepted(self):
        """The pool's ``accepted`` table (int32, one entry per scratch row), from its one home, the PoolState."""
        return self.pool_state.accepted

    def verify_tables(self, layer_id: int, req_pool_indices, slots) -> VerifyTables:
        """This verify forward's rows and seeds: built at the first linear layer (so a CUDA graph capture records
        the launch and every replay recomputes them), reused by every later layer of the same forward."""
        key = (slots.shape[0], slots.data_ptr(), req_pool_indices.data_ptr())
        if self.tables is None or layer_id == self.layers[0] or key != self._tables_of:
            rows, seeds = seed_index.seeded_rows(req_pool_indices, slots, self.accepted, self.pitch)
            self.tables, self._tables_of = VerifyTables(self, rows, seeds), key
        return self.tables

    def stage_in(self, cache, slots, rows) -> None:
        """After an extend wrote ``temporal[:, slots]`` (all layers): copy it into scratch column 0 of each request's
        row in one launch, and ``accepted[row] = 1`` (the next verify seeds from there). Padding (slot < 0): nothing."""
        import torch

        n = slots.shape[0]
        if n == 0:
            return
        if self._zeros is None:
            self._zeros = torch.zeros(self.accepted.shape[0], dtype=torch.int32, device=self.accepted.device)
        src, dst = cache.temporal[:, :, None], cache.intermediate_ssm[:, :, 0]  # [L, slots, 1, *st], [L, S+1, *st]
        plan = descriptor.get_plan([], [], dst, src, owner=cache.temporal)
        path = state_commit.launch(plan, ssm=(src, dst), accept=(self._zeros[:n], rows[:n]), src_rows=slots)
        report.count_launch(path)  # once per extend (the decode step's launch is counted with its commit)
        self.accepted.index_fill_(0, torch.where(slots >= 0, rows[:n], 0).long(), 1)

    def commit(self, cache, accept, track, rows):
        """Z5, the zero-copy committer (:func:`~sglang_mamba_dedup.patches.commit.bind_committer`): the conv windows
        of the accepted step from the requests' scratch rows ``rows`` (SGLang's ``req_pool_indices``), ``accepted[row]
        = step + 1`` stored by the same launch; no SSM bytes. ``accept`` = ``(steps, slots)``. Z5' (the radix cache
        on, docs/zero-copy.md §12.3): ``track`` = ``(steps_to_track, track_slots)``, or None; with a track set, the
        same one launch also copies the SSM state and the conv windows of each tracked step into its track slot, from
        the same scratch rows (never batch positions: HR1; the tracked column, never ``accepted - 1``: HR2), and no
        track row stores ``accepted`` (R7). Returns ``(plan, path)``: the plan (the route keeps it alive for CUDA
        graphs) and the launch path, which the commit wrapper counts."""
        if rows is None:
            raise RuntimeError("zero-copy commit without req_pool_indices: the scratch rows are unknown")
        n = accept[0].shape[0] if track is None else max(accept[0].shape[0], track[0].shape[0])
        src_rows = rows if rows.shape[0] == n else rows[:n]  # no new view when SGLang's rows are the batch's
        if track is None:
            plan = descriptor.get_plan(cache.conv, cache.intermediate_conv_window, None, None, accepted=self.accepted)
            return plan, state_commit.launch(plan, accept=accept, src_rows=src_rows)
        plan = descriptor.get_plan(
            cache.conv,
            cache.intermediate_conv_window,
            cache.temporal,
            cache.intermediate_ssm,
            accepted=self.accepted,
            ssm_track_only=True,
        )
        ssm = (cache.intermediate_ssm, cache.temporal)
        return plan, state_commit.launch(plan, ssm=ssm, accept=accept, track=track, src_rows=src_rows)

    def materialize(self, cache) -> None:
        """Z6: ``temporal[slot] = scratch[row, accepted[row] - 1]`` (all layers, one indexed copy) for the queued
        hand-offs, then forget them."""
        import torch

        device = self.accepted.device
        rows = torch.tensor([row for row, _ in self.handoffs], dtype=torch.long, device=device)
        slots = torch.cat([slot.reshape(1) for _, slot in self.handoffs]).to(device=device, dtype=torch.long)
        self.handoffs.clear()
        cache.temporal[:, slots] = cache.intermediate_ssm[:, rows, self.accepted.index_select(0, rows).long() - 1]
