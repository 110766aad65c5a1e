"""Jobs: runs started, recorded and read back; above what a run is (runs/), the records (records/)
and the trainer (train/).

    launch        start the trainer under torchrun and keep what it printed
    running       run(cfg, mode): live, from the records, or the reference record; run_many
    reuse         process reuse: the runs of one world size share a launch (train.batch)
    sweep         questions of several runs: the largest batch that fits, loss parity
    peer          the same RunConfig given to Megatron-LM's own pretrain_gpt.py
    slurm         an sbatch script for several nodes; node 0 records the run
    bench         measured ceilings: matmul, HBM copy, kernel launch, NCCL collectives
"""
