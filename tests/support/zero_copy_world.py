"""One layer's pool, scratch and weights on which SGLang 0.5.23's own verify kernels run (GDN's
``TritonGDNKernel.target_verify`` or the Mamba2 ``selective_state_update``, after SGLang's Triton
``causal_conv1d_update``), through the plugin's zero-copy wrappers in the zero-copy world: the world of
``tests/zero_copy/test_zero_copy_kernels.py`` (a random schedule, stock vs zero-copy) and
``tests/zero_copy/test_zero_copy_padding_poison.py`` (a padded batch with poisoned rows). On a CPU the kernels run
under ``TRITON_INTERPRET=1`` (tests/conftest.py); with a CUDA GPU, compiled.
"""

from __future__ import annotations

import types

import torch

from sglang_mamba_dedup import state
from sglang_mamba_dedup.patches import commit as commit_patch
from sglang_mamba_dedup.patches.zero_copy import bookkeeping, hooks
from tests.support import zero_copy_sim as sim

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU: TRITON_INTERPRET (tests/conftest.py)
ROWS, SLOTS, H, HV, KD, VD, CONV_K = 6, 9, 2, 4, 8, 8, 4
DIM = 2 * H * KD + HV * VD  # q, k, v channels of the conv, as GDN splits them


class World:
    """One layer's pool, scratch and weights; ``zc``: the plugin's zero-copy bookkeeping (None: stock)."""

    def __init__(self, drafts: int, ssm_dtype, zc: bool, gen: torch.Generator, kind: str = "gdn"):
        def r(*shape):
            return torch.randn(*shape, generator=gen).to(DEVICE)

        self.kind = kind  # "gdn": state [HV, V, K]; "mamba2": [heads, head_dim, dstate] (the same sizes here)
        self.temporal = torch.zeros(1, SLOTS, HV, VD, KD, dtype=ssm_dtype, device=DEVICE)
        self.conv = torch.zeros(1, SLOTS, DIM, CONV_K - 1, device=DEVICE)
        self.inter_ssm = torch.zeros(1, ROWS + 1, drafts, HV, VD, KD, dtype=ssm_dtype, device=DEVICE)
        self.inter_conv = torch.zeros(1, ROWS + 1, drafts, DIM, CONV_K - 1, device=DEVICE)
        self.weight, self.bias = r(DIM, CONV_K) * 0.5, r(DIM) * 0.1
        self.A_log, self.dt_bias, self.mix = r(HV) * 0.5, r(HV) * 0.5, r(HV, VD, KD) * 0.1
        self.proj_a, self.proj_b = r(DIM, HV) * 0.2, r(DIM, HV) * 0.2
        self.cache = types.SimpleNamespace(
            temporal=self.temporal,
            intermediate_ssm=self.inter_ssm,
            conv=[self.conv],
            intermediate_conv_window=[self.inter_conv],
        )
        self.pool = types.SimpleNamespace(mamba_cache=self.cache)
        if zc:
            state.pool_state(self.pool).zero_copy = bookkeeping.ZeroCopy(self.pool)
        self.route = commit_patch._Route(None, self.pool, self.cache, None)

    @property
    def zc(self):
        """The pool's zero-copy bookkeeping, None for the stock (or plugin-commit) world."""
        ps = state.pool_state_of(self.pool)
        return ps.zero_copy if ps is not None else None

    def extend(self, e: sim.Extend) -> None:
        """A stand-in prefill chunk: the new state is a fixed function of the stored one and the chunk."""
        if e.init is not None:  # a join: the slot's initial state
            self.temporal[0, e.slot], self.conv[0, e.slot] = e.init
        mean = e.chunk.mean().to(DEVICE)
        self.conv[0, e.slot] = self.conv[0, e.slot] * 0.9 + mean
        self.temporal[0, e.slot] = (self.temporal[0, e.slot].float() * 0.9 + mean * self.mix).to(self.temporal.dtype)

    def verify(
        self, v: sim.Verify, rpi: torch.Tensor, slots: torch.Tensor, default_rows: torch.Tensor, stock_rows=False
    ):
        if self.kind == "mamba2":
            return self._verify_mamba2(v, rpi, slots, stock_rows)
        from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update
        from sglang.srt.layers.attention.linear import gdn_backend
        from sglang.srt.layers.attention.linear.kernels.gdn_triton import TritonGDNKernel

        b, d = v.drafts.shape[:2]
        zc = self.zc  # Z1: the forward's rows and seeds, built once at its first linear layer
        token = hooks._ACTIVE.set(zc.verify_tables(0, rpi, slots)) if zc is not None else None
        try:
            select = gdn_backend.select_verify_intermediate_state_indices
            if stock_rows:  # negative control: SGLang's batch-position rows under the zero-copy seed
                select = select.__wrapped__
            rows = select(default_rows, rpi, slots >= 0, ROWS)
            y = causal_conv1d_update(
                v.drafts.to(DEVICE).transpose(1, 2).contiguous(),
                self.conv[0],
                self.weight,
                self.bias,
                "silu",
                conv_state_indices=slots,
                intermediate_conv_window=self.inter_conv[0],
                intermediate_state_indices=rows[:b],
            )
            x = y.transpose(1, 2).reshape(b * d, DIM)
            q, k, val = torch.split(x, [H * KD, H * KD, HV * VD], dim=-1)
            out = TritonGDNKernel().target_verify(
                self.A_log,
                self.dt_bias,
                q.reshape(1, b * d, H, KD).contiguous(),
                k.reshape(1, b * d, H, KD).contiguous(),
                val.reshape(1, b * d, HV, VD).contiguous(),
                x @ self.proj_a,
                x @ self.proj_b,
                ssm_states=self.temporal[0],
                cache_indices=slots,
                query_start_loc=torch.arange(0, b + 1, dtype=torch.int32, device=DEVICE) * d,
                intermediate_states_buffer=self.inter_ssm[0],
                intermediate_state_indices=rows,
                cache_steps=d,
                retrieve_parent_token=None,
            )
        finally:
            if token is not None:
                hooks._ACTIVE.reset(token)
        return y, out.reshape(b, d, HV, VD), rows

    def _verify_mamba2(self, v: sim.Verify, rpi: torch.Tensor, slots: torch.Tensor, stock_rows: bool):
        """The Mamba2 mixer's verify: SGLang's Triton conv and ``selective_state_update`` as the mixer calls them,
        through the plugin's Z4 binding wrappers in the zero-copy world (rows and seeds as ``mamba2_forward``
        sets them); stock rows are batch positions (``mamba.py``'s ``arange``, clamped to the scratch here)."""
        from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update
        from sglang.kernels.ops.mamba.triton_ops.mamba_ssm import selective_state_update

        b, d = v.drafts.shape[:2]
        zc = self.zc
        positions = torch.arange(b, dtype=torch.int32, device=DEVICE).clamp(max=ROWS)
        rows, token = positions, None
        if zc is not None:  # Z4: the forward's tables; the negative control builds them on batch positions
            tables = zc.verify_tables(0, positions if stock_rows else rpi, slots)
            rows, token = tables.rows, hooks._ACTIVE.set(tables)
        conv = (lambda w, i, a, k: w(*a, **k)) if zc is None else hooks.mamba2_conv
        ssm = (lambda w, i, a, k: w(*a, **k)) if zc is None else hooks.mamba2_ssm
        try:
            y = conv(
                causal_conv1d_update,
                None,
                (v.drafts.to(DEVICE).transpose(1, 2).contiguous(), self.conv[0], self.weight, self.bias, "silu"),
                dict(
                    conv_state_indices=slots,
                    intermediate_conv_window=self.inter_conv[0],
                    intermediate_state_indices=positions,
                ),
            )
            x = y.transpose(1, 2)  # [b, d, DIM]: x | B | C
            xs, bm, cm = torch.split(x, [HV * VD, 2 * KD, 2 * KD], dim=-1)
            dt = (x @ self.proj_a)[..., None].expand(b, d, HV, VD).contiguous()
            out = torch.empty(b, d, HV, VD, device=DEVICE)
            ssm(
                selective_state_update,
                None,
                (
                    self.temporal[0],
                    xs.reshape(b, d, HV, VD).contiguous(),
                    dt,
                    -torch.exp(self.A_log)[:, None, None].expand(HV, VD, KD),
                    bm.reshape(b, d, 2, KD).contiguous(),
                    cm.reshape(b, d, 2, KD).contiguous(),
                    self.dt_bias[:, None].expand(HV, VD) * 0 + 0.5,
                ),
                dict(
                    z=None,
                    dt_bias=self.dt_bias[:, None].expand(HV, VD),
                    dt_softplus=True,
                    state_batch_indices=slots,
                    out=out,
                    disable_state_update=True,
                    intermediate_states_buffer=self.inter_ssm[0],
                    cache_steps=d,
                    retrieve_parent_token=None,
                    intermediate_state_indices=positions,
                ),
            )
        finally:
            if token is not None:
                hooks._ACTIVE.reset(token)
        return y, out, rows

    def commit(self, steps, slots, rows, rpi) -> None:
        if self.zc is None:  # SGLang's scatter, in PyTorch: scratch [batch position, step] -> slot
            for n in range(steps.shape[0]):
                if steps[n] >= 0 and slots[n] >= 0:
                    self.temporal[0, slots[n]] = self.inter_ssm[0, rows[n], steps[n]]
                    self.conv[0, slots[n]] = self.inter_conv[0, rows[n], steps[n]]
        else:
            self.route.commit((steps, slots), None, rpi)

    def live(self, row: int, slot: int) -> torch.Tensor:
        zc = self.zc
        if zc is None:
            return self.temporal[0, slot].clone()
        return self.inter_ssm[0, row, int(zc.accepted[row]) - 1].clone()
