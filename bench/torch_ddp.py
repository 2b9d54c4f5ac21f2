#!/usr/bin/env python3
"""Reference peer: PyTorch DDP (gloo, CPU, one thread per rank) training the same GPT-2-style
shape as shardbench's `small` at the same world size and batch, timed the same way (per step,
max over ranks, median of the measured steps). Prints one JSON line. Timing only: the data are
random tokens, so its losses are not comparable with shardbench's (no parity check here).

Launches its own ranks with torch.multiprocessing.spawn (MASTER_ADDR=127.0.0.1); needs
Debian's python3-torch (ci/setup_peer.sh).
"""
import argparse
import json
import math
import os
import socket
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported
os.environ.setdefault("MKL_NUM_THREADS", "1")

try:
    import torch  # noqa: E402
except ImportError:
    # Debian's python3-torch lives in the system interpreter; a pyenv/venv python3 on PATH
    # does not see it. Re-run under /usr/bin/python3 rather than fail.
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("torch_ddp.py: no torch in this Python; install python3-torch (ci/setup_peer.sh)")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

# L, C, H, T, V of shardbench's presets (harness/model/config.cc).
PRESETS = {"tiny": (2, 32, 4, 16, 64), "small": (4, 256, 8, 128, 4096)}


class Block(nn.Module):
    """Pre-LN block: x + attn(ln_1(x)), then x + mlp(ln_2(x)); causal MHA, 4C GELU(tanh) MLP."""

    def __init__(self, C, H, L):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fc_proj = nn.Linear(4 * C, C)
        for lin, std in ((self.qkv, 0.02), (self.fc, 0.02),
                         (self.proj, 0.02 / math.sqrt(2 * L)),
                         (self.fc_proj, 0.02 / math.sqrt(2 * L))):
            nn.init.normal_(lin.weight, std=std)
            nn.init.zeros_(lin.bias)

    def forward(self, x, mask):
        B, T, C = x.shape
        hs = C // self.H
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # torch 1.13: no SDPA
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    """Token + position embedding, L blocks, final LN, LM head tied to the token embedding."""

    def __init__(self, L, C, H, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(C, H, L) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        # A plain attribute, not a buffer: gloo cannot broadcast bool tensors at DDP start-up.
        self.mask = torch.ones(T, T, dtype=torch.bool).triu(1)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def worker(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    L, C, H, T, V = PRESETS[args.model]
    torch.manual_seed(args.seed)  # same init on every rank (DDP broadcasts rank 0's anyway)
    model = DDP(Gpt(L, C, H, T, V), bucket_cap_mb=args.bucket_mb,
                gradient_as_bucket_view=args.gradient_as_bucket_view)
    # Counted at the collective level: a comm hook sees every bucket the Reducer all-reduces
    # (its flat buffer) and then does what the default does (allreduce_hook: divide by the
    # world, all-reduce). Buckets of the last step, in the order they were reduced.
    buckets = []
    if args.count_buckets:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def counting_hook(state, bucket):
            buf = bucket.buffer()
            buckets.append({"index": bucket.index(), "elements": buf.numel(),
                            "bytes": buf.numel() * buf.element_size(), "dtype": str(buf.dtype)})
            return default_hooks.allreduce_hook(state, bucket)
        model.register_comm_hook(None, counting_hook)
    # AdamW as shardbench's: decay on matrices and embeddings, not on biases and LayerNorms.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        idx = torch.randint(V, (args.batch, T), generator=gen)
        tgt = torch.randint(V, (args.batch, T), generator=gen)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        buckets.clear()
        loss = model(idx, tgt)
        loss.backward()  # DDP all-reduces the gradient buckets during backward
        opt.step()
        local = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(local, op=dist.ReduceOp.MAX)  # the step of the slowest rank
        losses.append(loss.item())
        if step >= args.warmup:
            times.append(local.item())
    if rank == 0:
        med = statistics.median(times)
        tokens = args.world * args.batch * T
        print(json.dumps({
            "framework": "pytorch-ddp", "torch": torch.__version__, "backend": "gloo",
            "model": args.model, "world": args.world, "batch_per_rank": args.batch,
            "threads_per_rank": torch.get_num_threads(), "warmup": args.warmup,
            "steps": args.steps, "params": sum(p.numel() for p in model.parameters()),
            "median_step_s": med, "tokens_per_s": tokens / med, "step_time_s": times,
            "loss": losses, "bucket_cap_mb": args.bucket_mb,
            "first_bucket_bytes": dist._DEFAULT_FIRST_BUCKET_BYTES,
            "gradient_as_bucket_view": args.gradient_as_bucket_view,
            "last_step_buckets": buckets if args.count_buckets else None}), flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=4, help="samples per rank")
    p.add_argument("--steps", type=int, default=5, help="measured steps")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--model", choices=sorted(PRESETS), default="small")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--gradient-as-bucket-view", action="store_true")
    p.add_argument("--count-buckets", action="store_true",
                   help="record the all-reduced buckets of the last step (comm hook)")
    args = p.parse_args()
    if args.world < 1 or args.batch < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--world, --batch and --steps must be >= 1, --warmup >= 0")
    mp.spawn(worker, args=(args, free_port()), nprocs=args.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
