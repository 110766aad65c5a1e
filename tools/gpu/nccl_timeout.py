"""Provoke a real NCCL timeout, safely, for the log parser's test fixture
(tests/data/log_nccl_timeout.txt).

    torchrun --nproc_per_node=2 tools/gpu/nccl_timeout.py > log.txt 2>&1

Two ranks agree on one all-reduce, then rank 1 skips the second: rank 0 waits in NCCL until the 15 s
process-group timeout, its watchdog aborts the communicator and torchrun tears the job down. Nothing
else runs on those GPUs, and every process is gone within a minute.
"""

import datetime
import os
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=15))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print(f"rank {rank}: first all-reduce ok ({x[0].item():.0f})", flush=True)
if rank == 0:
    dist.all_reduce(x)  # rank 1 never joins
    torch.cuda.synchronize()
else:
    time.sleep(90)  # torchrun kills this rank when rank 0 dies
dist.destroy_process_group()
