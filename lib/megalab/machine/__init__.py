"""The machine: what the GPUs promise, what they reach, and where a number was measured.

    hardware      datasheet numbers per GPU model
    bench         measured ceilings: matmul, HBM copy, NCCL collectives
    env           a fingerprint of the machine and the code, kept with every record
"""
