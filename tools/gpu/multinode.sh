#!/usr/bin/env bash
# Two torchrun agents on one host, as two "nodes" of 2 GPUs each (a static rendezvous on localhost):
# TP=2 inside a node, DP=2 across the nodes. Node 0 records the run.
set -u
flags="--preset gpt-350m --impl local --gpus 4 --tp 2 --mbs 4 --gbs 16 --iters 30 --mode live --tag multinode --nnodes 2 --rdzv-endpoint localhost:29411"
CUDA_VISIBLE_DEVICES=2,3 python3 -m megalab run $flags --node-rank 1 > /tmp/node1.log 2>&1 &
CUDA_VISIBLE_DEVICES=0,1 python3 -m megalab run $flags --node-rank 0
wait
tail -5 /tmp/node1.log
