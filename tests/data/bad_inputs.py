"""Mistakes a reader can make at the `megalab` command line, as data: (argv, reason).

Every one must end with exit status 2, no traceback, and a short message whose first lines match
`reason` (a regex); tests/test_cli.py runs them all. `{tmp}` is a fresh folder holding the files named
in FILES (written by the test), so the file-reading commands have something wrong to read.
"""

# file name -> its text, or ("record", changes): a good record, then one with these changes (config
# changes merged into its config), then a good one again: the bad line is always line 2
FILES = {
    "torn.jsonl": '{"schema": 1, "id": "ab',
    "bad_status.jsonl": ("record", {"status": "great"}),
    "bad_key.jsonl": ("record", {"key": "0000000000000000"}),
    "bad_config.jsonl": ("record", {"config": {"tp": "2"}}),
    "bad_name.jsonl": ("record", {"config": {"name": "../../etc"}}),
    "empty.jsonl": "\n",
    "a_file.txt": "not a results folder\n",
    "no_text.jsonl": '{"body": "hello"}\n',
    "corpus.jsonl": '{"text": "hello"}\n',
    "bad_summary.jsonl": ("record", {"summary": {"step_time_s": "fast"}}),
}

TINY = ["--preset", "gpt-tiny"]

BAD_INPUTS = [
    # -- the command itself ---------------------------------------------------------------------------
    ([], r"megalab: error: the following arguments are required: COMMAND"),
    (["no-such-command"], r"invalid choice: 'no-such-command'"),
    (["--bogus"], r"unrecognized arguments: --bogus|required: COMMAND"),
    (["env", "--nope"], r"megalab env: error: unrecognized arguments: --nope"),
    (["presets", "--nope"], r"megalab presets: error: unrecognized arguments: --nope"),
    (["chapters", "extra"], r"megalab chapters: error: unrecognized arguments: extra"),
    # -- plan: flags of a configuration -------------------------------------------------------------------
    (["plan", "--tp", "two"], r"argument --tp: invalid int value: 'two'"),
    (["plan", "--lr", "abc"], r"argument --lr: invalid float value: 'abc'"),
    (["plan", "--preset", "nope"], r"unknown preset 'nope': pick one of gpt-tiny"),
    (["plan", "--gpu", "Z9000"], r"argument --gpu: unknown GPU 'Z9000': known GPUs are"),
    (["plan", "--heads", "16", "--gpus", "4", "--tp", "3"], r"gpus=4 is not divisible by tp\*pp\*cp=3"),
    (["plan", "--tp", "0"], r"tp=0 must be at least 1"),
    (["plan", "--norm", "BatchNorm"], r"argument --norm: invalid choice: 'BatchNorm'"),
    (["plan", "--dropout", "1.5"], r"dropout=1.5 must be in \[0, 1\)"),
    (["plan", "--name", "../etc"], r"name='../etc' cannot name a run folder"),
    (["plan", "--name", ".hidden"], r"name='.hidden' cannot name a run folder"),
    (["plan", "--name", "my run"], r"name='my run' cannot name a run folder"),
    (["plan", "--json", "extra"], r"megalab plan: error: unrecognized arguments: extra"),
    (["plan", "--search", "--top", "0"], r"argument --top: 0 is too small"),
    (["plan", *TINY, "--top", "3"], r"--top 3 ranks the layouts of --search: add --search"),
    (["plan", "--search", *TINY, "--gpus", "0"], r"invalid configuration:\n  gpus=0 must be at least 1"),
    # -- run ------------------------------------------------------------------------------------------
    (["run", *TINY, "--mode", "fast"], r"argument --mode: invalid choice: 'fast'"),
    (["run", *TINY, "--gpu", "H100"], r"unrecognized arguments: --gpu H100"),   # not an abbreviation of --gpus
    (["run", "--preset", "gpt-350m", "--mode", "cached", "--tp", "3", "--gpus", "2"],
     r"invalid configuration:\n  gpus=2 is not divisible by tp\*pp\*cp=3"),
    (["run", *TINY, "--mode", "auto", "--tp", "4", "--gpus", "2"], r"gpus=2 is not divisible by tp\*pp\*cp=4"),
    (["run", *TINY, "--mode", "cached", "--lr", "nan"], r"lr=nan must be a positive, finite learning rate"),
    (["run", *TINY, "--mode", "cached", "--lr", "-1"], r"lr=-1.0 must be a positive, finite learning rate"),
    (["run", *TINY, "--mode", "cached", "--lr", "inf"], r"lr=inf must be a positive, finite learning rate"),
    (["fit", *TINY, "--mode", "cached", "--tp", "3"], r"gpus=\d+ is not divisible by tp\*pp\*cp=3|tp=3 does not divide"),
    (["parity", *TINY, "--mode", "cached", "--ep", "3"], r"not divisible by etp\*ep\*pp=3"),
    (["slurm", *TINY, "--tp", "5", "--nodes", "1"], r"tp\*pp\*cp=5|tp=5 does not divide"),
    (["run", *TINY, "--timeout", "-5"], r"argument --timeout: -5 is too small: pass seconds"),
    (["run", *TINY, "--timeout", "0"], r"argument --timeout: 0: pass seconds, more than 0"),
    (["run", *TINY, "--timeout", "nan"], r"argument --timeout: nan is too small"),
    (["run", *TINY, "--nnodes", "0"], r"argument --nnodes: 0 is too small"),
    (["run", *TINY, "--node-rank", "-1"], r"argument --node-rank: -1 is too small: pass a whole number of 0"),
    (["run", *TINY, "--gpus", "2", "--gbs", "8", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"],
     r"--node-rank 2 with --nnodes 2: ranks go from 0 to 1"),
    (["run", *TINY, "--gpus", "2", "--gbs", "8", "--nnodes", "2"], r"--nnodes 2 needs --rdzv-endpoint"),
    (["run", *TINY, "--tp", "1", "--pp", "1", "--gpus", "3", "--gbs", "6", "--nnodes", "2", "--rdzv-endpoint", "h:1"],
     r"gpus=3 does not split over --nnodes 2"),
    (["run", *TINY, "--name", "a/b", "--mode", "cached"], r"name='a/b' cannot name a run folder"),
    # -- results --------------------------------------------------------------------------------------
    (["results", "--import", "{tmp}/missing.jsonl"], r"missing.jsonl: no such file"),
    (["results", "--import", "{tmp}/torn.jsonl"], r"torn.jsonl:1: not JSON"),
    (["results", "--import", "{tmp}/bad_status.jsonl"], r"bad_status.jsonl:2: status='great': pick one of"),
    (["results", "--import", "{tmp}/bad_summary.jsonl"], r"bad_summary.jsonl:2: summary .step_time_s. should be a measured amount"),
    (["results", "--import", "{tmp}/bad_key.jsonl"], r"bad_key.jsonl:2: key '0+' is not its config's key"),
    (["results", "--import", "{tmp}/bad_config.jsonl"], r"bad_config.jsonl:2: config field 'tp' should be int"),
    (["results", "--import", "{tmp}/bad_name.jsonl"], r"bad_name.jsonl:2: config: name='../../etc'"),
    (["results", "--import", "{tmp}/empty.jsonl"], r"empty.jsonl: holds no records"),
    (["results", "--import"], r"argument --import: expected one argument"),
    (["results", "--store", "{tmp}/nowhere"], r"--store .*nowhere: no such folder"),
    (["results", "--store", "{tmp}/a_file.txt"], r"--store .*a_file.txt: no such folder"),
    (["results", "--kind", "trains"], r"argument --kind: invalid choice: 'trains'"),
    (["results", "--status", "great"], r"argument --status: invalid choice: 'great'"),
    # -- experiments ------------------------------------------------------------------------------------
    (["experiments"], r"the following arguments are required: chapter"),
    (["experiments", "ch99"], r"unknown chapter 'ch99': pick one of ch01 \(01_data_parallel\)"),
    (["experiments", "ch01", "--gpus", "0"], r"argument --gpus: 0 is too small"),
    (["experiments", "ch01", "--gpu", "Z9000"], r"argument --gpu: unknown GPU 'Z9000'"),
    # -- reproduce ------------------------------------------------------------------------------------
    (["reproduce", "ch09"], r"no page of the book matches 'ch09': pick from .*01_data_parallel"),
    (["reproduce", "--mode", "fast"], r"argument --mode: invalid choice: 'fast'"),
    (["reproduce", "--gpus", "-1"], r"argument --gpus: -1 is too small"),
    # -- slurm ----------------------------------------------------------------------------------------
    (["slurm", *TINY], r"the following arguments are required: --nodes"),
    (["slurm", *TINY, "--nodes", "0"], r"argument --nodes: 0 is too small"),
    (["slurm", *TINY, "--gpus", "2", "--gbs", "8", "--nodes", "3"], r"gpus=2 does not split over 3 nodes"),
    (["slurm", *TINY, "--nodes", "1", "--gpus-per-node", "2"], r"nodes x gpus_per_node = 2 .* make them equal"),
    (["slurm", *TINY, "--nodes", "1", "--partition", "gpu;reboot"], r"argument --partition: 'gpu;reboot': use"),
    (["slurm", *TINY, "--nodes", "1", "--account", "my lab"], r"argument --account: 'my lab': use letters"),
    (["slurm", *TINY, "--nodes", "1", "--time", "1:00\n#SBATCH --x"], r"argument --time: .*use letters"),
    (["slurm", *TINY, "--nodes", "1", "--name", "x$(id)"], r"argument --name: name='x\$\(id\)' cannot"),
    # -- fit / parity -----------------------------------------------------------------------------------
    (["fit", *TINY, "--lo", "10", "--hi", "1"], r"--lo 10 is above --hi 1"),
    (["fit", *TINY, "--vary", "heads"], r"argument --vary: invalid choice: 'heads'"),
    (["fit", *TINY, "--lo", "0"], r"argument --lo: 0 is too small"),
    (["fit", *TINY, "--step", "0"], r"argument --step: 0 is too small"),
    (["fit", *TINY, "--vary", "seq", "--lo", "1", "--hi", "100"], r"no multiple of 128 in \[1, 100\]"),
    (["parity", *TINY, "--repeats", "0"], r"argument --repeats: 0 is too small"),
    # -- prepare-data -----------------------------------------------------------------------------------
    (["prepare-data", "--input", "{tmp}/missing.jsonl", "--output-prefix", "{tmp}/out"],
     r"missing.jsonl: no such file: pass a JSON Lines file"),
    (["prepare-data", "--input", "{tmp}/no_text.jsonl", "--output-prefix", "{tmp}/out"],
     r"no_text.jsonl:1: no text in field 'text'"),
    (["prepare-data", "--input", "{tmp}/corpus.jsonl", "--output-prefix", "{tmp}/out", "--tokenizer", "/no/such"],
     r"tokenizer '/no/such': pass 'byte' or the folder"),
    (["prepare-data", "--input", "x.jsonl"], r"the following arguments are required: --output-prefix"),
    # -- peer -----------------------------------------------------------------------------------------
    (["peer", *TINY, "--tp", "2", "--gpus", "3"], r"gpus=3 is not divisible by tp\*pp\*cp=2"),
    (["peer", *TINY, "--megatron-lm", "{tmp}/nowhere"], r"nowhere"),
    # -- bench ----------------------------------------------------------------------------------------
    (["bench", "--gpus", "0"], r"megalab bench: error: argument --gpus: 0 is too small"),
    (["bench", "--nope"], r"megalab bench: error: unrecognized arguments: --nope"),
]
