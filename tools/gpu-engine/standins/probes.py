"""Measurement probes (not stand-ins): switched on by environment variables, they log one line each and
change nothing.

* ``SMD_PROBE_LOAD=1``: after every ``ModelRunner.load_model`` one stderr line
  ``[load-probe] {json}`` with what that load left on the GPU: the model's parameter bytes and buffer bytes
  (unique storages on CUDA; each buffer's storage pointer, so a buffer shared with an earlier model, e.g. a
  cached RoPE table, is marked ``shared``), the allocator's allocated bytes and the device's free memory
  before and after (``mem_get_info`` after ``empty_cache``, as SGLang's ``mem usage`` line). Issue 35: what the
  server loads beside the checkpoint.
* ``SMD_PROBE_PAD=1``: the first time each (forward mode, real batch, padded batch) reaches a CUDA-graph
  replay (``CudaGraphBufferRegistry.fill_from``), one stderr line ``[pad-probe] {json}`` with the three and
  ``padded`` (true when the graph's batch is larger than the real one). Issue 36: shows that an e2e meant to
  pad a verify batch really replayed a larger graph.
"""

import json
import os
import sys

from . import _hooks

_SEEN_STORAGES = {}  # storage pointer -> "model#name" of the first model that held it


def _footprint(model, tag):
    params = {}
    buffers = {}
    for _name, p in model.named_parameters(remove_duplicate=False):
        if p.is_cuda:
            params.setdefault(p.untyped_storage().data_ptr(), p.untyped_storage().nbytes())
    rows = []
    for name, b in model.named_buffers(remove_duplicate=False):
        if not b.is_cuda:
            continue
        ptr = b.untyped_storage().data_ptr()
        if ptr in buffers:
            continue
        size = b.untyped_storage().nbytes()
        buffers[ptr] = size
        first = _SEEN_STORAGES.get(ptr)
        rows.append({"name": name, "shape": list(b.shape), "dtype": str(b.dtype), "bytes": size, "shared_with": first})
        _SEEN_STORAGES.setdefault(ptr, f"{tag}#{name}")
    for ptr in params:
        _SEEN_STORAGES.setdefault(ptr, f"{tag}#param")
    rows.sort(key=lambda r: -r["bytes"])
    return {
        "param_bytes": sum(params.values()),
        "buffer_bytes": sum(buffers.values()),
        "buffer_bytes_not_shared": sum(r["bytes"] for r in rows if r["shared_with"] is None),
        "buffers": rows[:12],
        "buffers_total": len(rows),
    }


def load_footprint():
    if os.environ.get("SMD_PROBE_LOAD") != "1":
        return

    @_hooks.when_imported("sglang.srt.model_executor.model_runner")
    def _probe(mod):
        import torch

        cls = mod.ModelRunner
        inner = cls.load_model

        def load_model(self, *a, **k):
            torch.cuda.empty_cache()
            free0 = torch.cuda.mem_get_info()[0]
            alloc0 = torch.cuda.memory_allocated()
            out = inner(self, *a, **k)
            torch.cuda.empty_cache()
            free1 = torch.cuda.mem_get_info()[0]
            alloc1 = torch.cuda.memory_allocated()
            tag = "draft" if getattr(self, "is_draft_worker", False) else "target"
            rec = {
                "role": tag,
                "type": type(self.model).__name__,
                "free_delta_bytes": free0 - free1,
                "allocated_delta_bytes": alloc1 - alloc0,
                "reserved_bytes": torch.cuda.memory_reserved(),
                **_footprint(self.model, tag),
            }
            sys.stderr.write("[load-probe] " + json.dumps(rec) + "\n")
            sys.stderr.flush()
            return out

        cls.load_model = load_model
        _hooks.log("probe: ModelRunner.load_model measured (SMD_PROBE_LOAD=1)")


_PAD_SEEN = set()


def pad_replays():
    if os.environ.get("SMD_PROBE_PAD") != "1":
        return

    @_hooks.when_imported("sglang.srt.model_executor.cuda_graph_buffer_registry")
    def _probe(mod):
        cls = mod.CudaGraphBufferRegistry
        inner = cls.fill_from

        def fill_from(self, forward_batch, *a, **k):
            raw, padded = k.get("raw_bs"), k.get("padded_bs")
            fm = getattr(forward_batch, "forward_mode", None)
            key = (getattr(fm, "name", str(fm)), raw, padded)
            if key not in _PAD_SEEN:
                _PAD_SEEN.add(key)
                rec = {
                    "mode": key[0],
                    "raw_bs": raw,
                    "padded_bs": padded,
                    "padded": isinstance(raw, int) and isinstance(padded, int) and padded > raw,
                }
                sys.stderr.write("[pad-probe] " + json.dumps(rec) + "\n")
                sys.stderr.flush()
            return inner(self, forward_batch, *a, **k)

        cls.fill_from = fill_from
        _hooks.log("probe: CudaGraphBufferRegistry.fill_from watched (SMD_PROBE_PAD=1)")
