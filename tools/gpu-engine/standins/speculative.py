"""Speculative decoding (EAGLE / NEXTN) without sgl_kernel: the tree build, the greedy verify, top-k.

* 0.5.21+: ``sglang.kernels.ops.speculative.tree`` calls JIT kernels; SGLang's own Triton twins in
  ``spec_tree`` take over (skip names ``tree``, ``verify``), behind an adapter for the older ``retrive_*``
  spelling. 0.5.21 ships those Triton kernels without their launchers: launched here.
* up to 0.5.20 (0.5.13.post1 read) SGLang calls the AOT sgl_kernel ops itself on CUDA, and the older releases
  ship no Triton twin: ``from sgl_kernel import build_tree_kernel_efficient`` (speculative/eagle_utils, module
  level), ``verify_tree_greedy`` (eagle_utils.verify_tree_greedy_func, at call time) and ``fast_topk``
  (speculative/spec_utils, module level). The sgl_kernel stand-in gets working host-side twins (same semantics
  as 0.5.23's Triton twins; small Python loops on the host, one sync per call; skip names ``tree``,
  ``verify``, ``topk``). 0.5.21+ never import these names from sgl_kernel on CUDA.
"""

from typing import Any, NamedTuple

from ._hooks import SKIP, log, skipped, when_imported

#: twin -> calls it served in this process
CALLS = {}

_RETRIEVE = ("retrieve_index", "retrieve_next_token", "retrieve_next_sibling")


def _count(key):
    CALLS[key] = CALLS.get(key, 0) + 1


class TreeArgs(NamedTuple):
    """The arguments of ``build_tree_kernel_efficient`` (SGLang's JIT op and sgl_kernel's AOT op alike)."""

    parent_list: Any
    selected_index: Any
    verified_seq_len: Any
    tree_mask: Any
    positions: Any
    retrieve_index: Any
    retrieve_next_token: Any
    retrieve_next_sibling: Any
    topk: int
    depth: int
    draft_token_num: int
    tree_mask_mode: int = 0


def _retrieve(retrive, kw):
    """The three retrieve buffers of a verify call, given as ``retrive_*`` (``retrive``) or as ``retrieve_*``
    keywords (``kw``)."""
    return tuple(t if t is not None else kw.pop(name) for t, name in zip(retrive, _RETRIEVE))


# ---------------------------------------------------------------- 0.5.21+: SGLang's Triton twins


def _build_tree_triton(*args, **kwargs):
    from sglang.kernels.ops.speculative import spec_tree

    for old, new in zip(("retrive_index", "retrive_next_token", "retrive_next_sibling"), _RETRIEVE):
        if old in kwargs:
            kwargs[new] = kwargs.pop(old)
    _count("tree")
    if hasattr(spec_tree, "sgl_build_tree_kernel_triton"):
        return spec_tree.sgl_build_tree_kernel_triton(*args, **kwargs)
    return _launch_build_tree(spec_tree, TreeArgs(*args, **kwargs))


def _launch_build_tree(spec_tree, t: TreeArgs):
    """Releases before 0.5.23 (0.5.21 seen) ship the Triton tree kernel without its launcher."""
    import torch

    batch = t.verified_seq_len.shape[0]
    prefix = torch.cumsum(t.verified_seq_len, dim=0) - t.verified_seq_len
    parent_list = t.parent_list
    spec_tree.sgl_build_tree_kernel_efficient_triton[(batch,)](
        parent_list,
        t.selected_index,
        t.verified_seq_len,
        prefix,
        t.tree_mask,
        t.positions,
        t.retrieve_index,
        t.retrieve_next_token,
        t.retrieve_next_sibling,
        topk=t.topk,
        depth=t.depth,
        draft_token_num=t.draft_token_num,
        tree_mask_mode=int(t.tree_mask_mode),
        batch_size=batch,
        parent_list_stride=parent_list.stride(0) if parent_list.dim() > 1 else parent_list.shape[0],
        selected_index_stride=t.selected_index.stride(0),
    )


def _verify_tree_greedy_triton(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index=None,
    retrive_next_token=None,
    retrive_next_sibling=None,
    target_predict=None,
    **kw,
):
    from sglang.kernels.ops.speculative import spec_tree

    ri, rn, rs = _retrieve((retrive_index, retrive_next_token, retrive_next_sibling), kw)
    _count("verify")
    if hasattr(spec_tree, "verify_tree_greedy_triton"):
        return spec_tree.verify_tree_greedy_triton(
            predicts, accept_index, accept_token_num, candidates, ri, rn, rs, target_predict
        )
    spec_tree.verify_tree_greedy_kernel_triton[(candidates.shape[0],)](  # 0.5.21: kernel only
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        ri,
        rn,
        rs,
        target_predict,
        batch_size=candidates.shape[0],
        num_speculative_tokens=accept_index.shape[1],
        num_draft_tokens=candidates.shape[1],
    )


# ---------------------------------------------------------------- up to 0.5.20: host-side twins on sgl_kernel


def _build_tree_host(*args, **kwargs):
    """sgl_kernel.build_tree_kernel_efficient; the retrieve_* buffers arrive filled with -1 (eagle_utils)."""
    import torch

    t = TreeArgs(*args, **kwargs)
    mode, n, topk = int(t.tree_mask_mode), int(t.draft_token_num), t.topk
    if mode == 2:
        raise NotImplementedError("tree stand-in: QLEN_ONLY_BITPACKING is not supported")
    _count("tree")
    bs = t.verified_seq_len.shape[0]
    par = t.parent_list.reshape(bs, -1).tolist()
    sel = t.selected_index.reshape(bs, -1).tolist()
    seq = t.verified_seq_len.tolist()

    def parent_slot(b, i):  # draft slot (0 = the verified token) of selected entry i's parent, or None
        tk = sel[b][i] // topk
        if tk == 0:
            return 0
        tok = par[b][tk]
        for pp in range(n - 1):
            if sel[b][pp] == tok:
                return pp + 1
        return None

    pos, nxt, sib, midx, mval = [], [], [], [], []
    prefix = 0
    for b in range(bs):
        L = int(seq[b])
        nx, sb = [-1] * n, [-1] * n
        for i in range(n - 1, 0, -1):
            pp = parent_slot(b, i - 1)
            if pp is not None:
                if nx[pp] != -1:
                    sb[i] = nx[pp]
                nx[pp] = i
        nxt.append(nx)
        sib.append(sb)
        for x in range(n):
            row = [True] + [False] * (n - 1)
            depth_x, cur = 0, x - 1
            if x > 0:
                for _ in range(t.depth):
                    depth_x += 1
                    row[cur + 1] = True
                    up = parent_slot(b, cur)
                    if not up:  # root reached (0) or parent not found (None)
                        break
                    cur = up - 1
            pos.append(L + depth_x)
            base = n * n * b + (prefix * n + (L + n) * x + L if mode == 0 else n * x)
            midx.extend(range(base, base + n))
            mval.extend(row)
        prefix += L
    positions, tree_mask = t.positions, t.tree_mask
    dev = positions.device
    positions.view(-1)[: bs * n].copy_(torch.tensor(pos, dtype=positions.dtype))
    t.retrieve_index.copy_(torch.arange(bs * n, device=dev).view(bs, n).to(t.retrieve_index.dtype))
    t.retrieve_next_token.copy_(torch.tensor(nxt, dtype=t.retrieve_next_token.dtype))
    t.retrieve_next_sibling.copy_(torch.tensor(sib, dtype=t.retrieve_next_sibling.dtype))
    tree_mask.view(-1)[torch.tensor(midx, dtype=torch.long, device=dev)] = torch.tensor(
        mval, dtype=tree_mask.dtype, device=dev
    )


def _verify_tree_greedy_host(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index=None,
    retrive_next_token=None,
    retrive_next_sibling=None,
    target_predict=None,
    **kw,
):
    """sgl_kernel.verify_tree_greedy: walk the tree along the target's greedy tokens."""
    import torch

    ri, rn, rs = (x.tolist() for x in _retrieve((retrive_index, retrive_next_token, retrive_next_sibling), kw))
    _count("verify")
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    cand = candidates.tolist()
    tp = target_predict.reshape(-1).tolist()
    acc = accept_index.tolist()
    nums, pidx, pval = [], [], []
    for b in range(bs):
        last, num, cur = ri[b][0], 0, 0
        acc[b][0] = last
        for _ in range(1, steps):
            cur, target, hit = rn[b][cur], tp[last], False
            for _ in range(n):
                if cur == -1:
                    break
                if cand[b][cur] == target:
                    pidx.append(last)
                    pval.append(target)
                    num += 1
                    acc[b][num] = last = ri[b][cur]
                    hit = True
                    break
                cur = rs[b][cur]
            if not hit:
                break
        nums.append(num)
        pidx.append(last)
        pval.append(tp[last])
    dev = predicts.device
    predicts.view(-1)[torch.tensor(pidx, dtype=torch.long, device=dev)] = torch.tensor(
        pval, dtype=predicts.dtype, device=dev
    )
    accept_index.copy_(torch.tensor(acc, dtype=accept_index.dtype))
    accept_token_num.copy_(torch.tensor(nums, dtype=accept_token_num.dtype))


def _fast_topk(values, topk, dim):  # sglang.srt.utils.common.fast_topk
    import torch

    return torch.max(values, dim=dim, keepdim=True) if topk == 1 else torch.topk(values, topk, dim=dim)


# ---------------------------------------------------------------- hooks


def install():
    if not skipped("tree") or not skipped("verify"):

        @when_imported("sglang.kernels.ops.speculative.tree")
        def _tree(m):
            if not skipped("tree"):
                m.build_tree_kernel_efficient = _build_tree_triton
                log("tree.build_tree_kernel_efficient -> spec_tree.sgl_build_tree_kernel_triton")
            if not skipped("verify"):
                m.verify_tree_greedy = _verify_tree_greedy_triton
                log("tree.verify_tree_greedy -> spec_tree.verify_tree_greedy_triton (retrive_* adapter)")

    if not skipped("tree"):

        @when_imported("sglang.kernels.ops.speculative.spec_tree")
        def _spec_tree(m):
            if hasattr(m, "sgl_build_tree_kernel_efficient"):
                m.sgl_build_tree_kernel_efficient = _build_tree_triton
                log("spec_tree.sgl_build_tree_kernel_efficient -> sgl_build_tree_kernel_triton")

    if not {"tree", "verify", "topk"} <= SKIP:

        @when_imported("sgl_kernel")
        def _sgl_kernel_ops(sk):
            if not str(getattr(sk, "__version__", "")).endswith("stub"):
                return
            for name, fn, key in (
                ("build_tree_kernel_efficient", _build_tree_host, "tree"),
                ("verify_tree_greedy", _verify_tree_greedy_host, "verify"),
                ("fast_topk", _fast_topk, "topk"),
            ):
                if not skipped(key):
                    setattr(sk, name, fn)
            log("sgl_kernel.{build_tree_kernel_efficient,verify_tree_greedy,fast_topk} -> host-side twins (<0.5.21)")
