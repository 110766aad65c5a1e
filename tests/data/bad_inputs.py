"""Mistakes a reader can make at the `megalab` command line, as data: (argv, reason).

Every one must end with exit status 2, no traceback, and a short message whose first lines match
`reason` (a regex); tests/test_cli.py runs them all. `{tmp}` is a fresh folder holding the files
named in FILES (written by the test), so the file-reading commands have something wrong to read.
Leading `NAME=value` items set an environment variable for the command, as a shell would.
"""

_DEEP = []
for _ in range(500):
    _DEEP = [_DEEP]
_BENCH = '{"schema": 1, "kind": "bench", "bench": "nccl", "recorded_at": "2026-01-01T00:00:00Z", '

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
    "good.jsonl": ("record", {}),
    # lines the store cannot use: nested too deep, numbers no float holds
    "deep.jsonl": ("record", {"predicted": {"x": _DEEP}}),
    "recursion.jsonl": "[" * 10_000 + "]" * 10_000 + "\n",
    "huge.jsonl": ("record", {"summary": {"steps": 10**500}}),
    # text a terminal would act on, and fields the chapters rely on
    "escape_label.jsonl": ("record", {"label": "\x1b]0;owned\x07"}),
    "escape_env.jsonl": ("record", {"env": {"gpu_name": "H200\x1b[2J", "gpu_count": 4}}),
    "escape_tag.jsonl": ("record", {"tags": ["group.ch02.tp", "\x1b[8m"]}),
    "escape_commit.jsonl": ("record", {"git_commit": "abc\n123"}),
    "escape_run_dir.jsonl": ("record", {"run_dir": "runs/\x9b2J"}),
    "escape_error.jsonl": ("record", {"error": {"message": "\x1b[31mboom"}}),
    "escape_invalid.jsonl": ("record", {"status": "invalid", "config": {"name": "\x1b[2J"}}),
    "not_a_date.jsonl": ("record", {"recorded_at": "not a date"}),
    "no_such_day.jsonl": ("record", {"recorded_at": "2026-02-30T12:00:00Z"}),
    "from_the_future.jsonl": ("record", {"recorded_at": "2999-01-01T00:00:00Z"}),
    "no_gpu_name.jsonl": ("record", {"env": {"gpu_count": 4}}),
    "bench_no_env.jsonl": _BENCH + '"env": {}}\n',
    "bench_gpu_count.jsonl": _BENCH + '"env": {"gpu_name": "H200", "gpu_count": "many"}}\n',
    "bench_date.jsonl": _BENCH.replace("2026-01-01T00:00:00Z", "yesterday")
    + '"env": {"gpu_name": "H200", "gpu_count": 1}}\n',
    "latin1.jsonl": '{"text": "caf\xe9"}\n'.encode("latin-1"),
    # store folders whose files are not regular files
    "runs_is_dir/runs.jsonl": ("dir",),
    "fifo_store/runs.jsonl": ("fifo",),
    "link_store/runs.jsonl": ("link", "../good.jsonl"),
    "link_lock/runs.jsonl.lock": ("link", "../a_file.txt"),
}

TINY = ["--preset", "gpt-tiny"]

BAD_INPUTS = [
    # -- the command itself
    # ---------------------------------------------------------------------------
    ([], r"megalab: error: the following arguments are required: COMMAND"),
    (["no-such-command"], r"invalid choice: 'no-such-command'"),
    (["--bogus"], r"unrecognized arguments: --bogus|required: COMMAND"),
    (["env", "--nope"], r"megalab env: error: unrecognized arguments: --nope"),
    (["presets", "--nope"], r"megalab presets: error: unrecognized arguments: --nope"),
    (["chapters", "extra"], r"megalab chapters: error: unrecognized arguments: extra"),
    # -- plan: flags of a configuration
    # -------------------------------------------------------------------
    (["plan", "--tp", "two"], r"argument --tp: invalid int value: 'two'"),
    (["plan", "--lr", "abc"], r"argument --lr: invalid float value: 'abc'"),
    (["plan", "--preset", "nope"], r"unknown preset 'nope': pick one of gpt-tiny"),
    (["plan", "--gpu", "Z9000"], r"argument --gpu: unknown GPU 'Z9000': known GPUs are"),
    (
        ["plan", "--heads", "16", "--gpus", "4", "--tp", "3"],
        r"gpus=4 is not divisible by tp\*pp\*cp=3",
    ),
    (["plan", "--tp", "0"], r"tp=0 must be at least 1"),
    (["plan", "--norm", "BatchNorm"], r"argument --norm: invalid choice: 'BatchNorm'"),
    (["plan", "--dropout", "1.5"], r"dropout=1.5 must be in \[0, 1\)"),
    (["plan", "--name", "../etc"], r"name='../etc' cannot name a run folder"),
    (["plan", "--name", ".hidden"], r"name='.hidden' cannot name a run folder"),
    (["plan", "--name", "my run"], r"name='my run' cannot name a run folder"),
    (["plan", "--json", "extra"], r"megalab plan: error: unrecognized arguments: extra"),
    (["plan", "--search", "--top", "0"], r"argument --top: 0 is too small"),
    (["plan", *TINY, "--top", "3"], r"--top 3 ranks the layouts of --search: add --search"),
    (
        ["plan", "--search", *TINY, "--gpus", "0"],
        r"invalid configuration: gpus=0 must be at least 1",
    ),
    # -- run ---------------------------------------------------------------------------------------
    (["run", *TINY, "--mode", "fast"], r"argument --mode: invalid choice: 'fast'"),
    # not an abbreviation of --gpus
    (["run", *TINY, "--gpu", "H100"], r"unrecognized arguments: --gpu H100"),
    (
        ["run", "--preset", "gpt-350m", "--mode", "cached", "--tp", "3", "--gpus", "2"],
        r"invalid configuration:\n  gpus=2 is not divisible by tp\*pp\*cp=3",
    ),
    (
        ["run", *TINY, "--mode", "auto", "--tp", "4", "--gpus", "2"],
        r"gpus=2 is not divisible by tp\*pp\*cp=4",
    ),
    (
        ["run", *TINY, "--mode", "cached", "--lr", "nan"],
        r"lr=nan must be a positive, finite learning rate",
    ),
    (
        ["run", *TINY, "--mode", "cached", "--lr", "-1"],
        r"lr=-1.0 must be a positive, finite learning rate",
    ),
    (
        ["run", *TINY, "--mode", "cached", "--lr", "inf"],
        r"lr=inf must be a positive, finite learning rate",
    ),
    (
        ["fit", *TINY, "--mode", "cached", "--tp", "3"],
        r"gpus=\d+ is not divisible by tp\*pp\*cp=3|tp=3 does not divide",
    ),
    (["parity", *TINY, "--mode", "cached", "--ep", "3"], r"not divisible by etp\*ep\*pp=3"),
    (["slurm", *TINY, "--tp", "5", "--nodes", "1"], r"tp\*pp\*cp=5|tp=5 does not divide"),
    (["run", *TINY, "--timeout", "-5"], r"argument --timeout: -5 is too small: pass seconds"),
    (["run", *TINY, "--timeout", "0"], r"argument --timeout: 0: pass seconds, more than 0"),
    (["run", *TINY, "--timeout", "nan"], r"argument --timeout: nan is too small"),
    (["run", *TINY, "--nnodes", "0"], r"argument --nnodes: 0 is too small"),
    (
        ["run", *TINY, "--node-rank", "-1"],
        r"argument --node-rank: -1 is too small: pass a whole number of 0",
    ),
    (
        [
            "run",
            *TINY,
            "--gpus",
            "2",
            "--gbs",
            "8",
            "--nnodes",
            "2",
            "--node-rank",
            "2",
            "--rdzv-endpoint",
            "h:1",
        ],
        r"--node-rank 2 with --nnodes 2: ranks go from 0 to 1",
    ),
    (
        ["run", *TINY, "--gpus", "2", "--gbs", "8", "--nnodes", "2"],
        r"--nnodes 2 needs --rdzv-endpoint",
    ),
    (
        [
            "run",
            *TINY,
            "--tp",
            "1",
            "--pp",
            "1",
            "--gpus",
            "3",
            "--gbs",
            "6",
            "--nnodes",
            "2",
            "--rdzv-endpoint",
            "h:1",
        ],
        r"gpus=3 does not split over --nnodes 2",
    ),
    (["run", *TINY, "--name", "a/b", "--mode", "cached"], r"name='a/b' cannot name a run folder"),
    # -- results
    # --------------------------------------------------------------------------------------
    (["results", "--import", "{tmp}/missing.jsonl"], r"missing.jsonl: no such file"),
    (["results", "--import", "{tmp}/torn.jsonl"], r"torn.jsonl:1: not JSON"),
    (
        ["results", "--import", "{tmp}/bad_status.jsonl"],
        r"bad_status.jsonl:2: status='great': pick one of",
    ),
    (
        ["results", "--import", "{tmp}/bad_summary.jsonl"],
        r"bad_summary.jsonl:2: summary .step_time_s. should be a measured amount",
    ),
    (
        ["results", "--import", "{tmp}/bad_key.jsonl"],
        r"bad_key.jsonl:2: key '0+' is not its config's key",
    ),
    (
        ["results", "--import", "{tmp}/bad_config.jsonl"],
        r"bad_config.jsonl:2: config field 'tp' should be int",
    ),
    (
        ["results", "--import", "{tmp}/bad_name.jsonl"],
        r"bad_name.jsonl:2: config: name='../../etc'",
    ),
    (["results", "--import", "{tmp}/empty.jsonl"], r"empty.jsonl: holds no records"),
    (["results", "--import"], r"argument --import: expected one argument"),
    (["results", "--store", "{tmp}/nowhere"], r"--store .*nowhere: no such folder"),
    (["results", "--store", "{tmp}/a_file.txt"], r"--store .*a_file.txt: no such folder"),
    (["results", "--kind", "trains"], r"argument --kind: invalid choice: 'trains'"),
    (["results", "--status", "great"], r"argument --status: invalid choice: 'great'"),
    # -- experiments
    # ------------------------------------------------------------------------------------
    (["experiments"], r"the following arguments are required: chapter"),
    (["experiments", "ch99"], r"unknown chapter 'ch99': pick one of ch01 \(01_data_parallel\)"),
    (["experiments", "ch01", "--gpus", "0"], r"argument --gpus: 0 is too small"),
    (["experiments", "ch01", "--gpu", "Z9000"], r"argument --gpu: unknown GPU 'Z9000'"),
    # -- reproduce
    # ------------------------------------------------------------------------------------
    (["reproduce", "ch09"], r"no page of the book matches 'ch09': pick from .*01_data_parallel"),
    (["reproduce", "--mode", "fast"], r"argument --mode: invalid choice: 'fast'"),
    (["reproduce", "--gpus", "-1"], r"argument --gpus: -1 is too small"),
    # -- slurm -------------------------------------------------------------------------------------
    (["slurm", *TINY], r"the following arguments are required: --nodes"),
    (["slurm", *TINY, "--nodes", "0"], r"argument --nodes: 0 is too small"),
    (
        ["slurm", *TINY, "--gpus", "2", "--gbs", "8", "--nodes", "3"],
        r"gpus=2 does not split over 3 nodes",
    ),
    (
        ["slurm", *TINY, "--nodes", "1", "--gpus-per-node", "2"],
        r"nodes x gpus_per_node = 2 .* make them equal",
    ),
    (
        ["slurm", *TINY, "--nodes", "1", "--partition", "gpu;reboot"],
        r"argument --partition: 'gpu;reboot': use",
    ),
    (
        ["slurm", *TINY, "--nodes", "1", "--account", "my lab"],
        r"argument --account: 'my lab': use letters",
    ),
    (
        ["slurm", *TINY, "--nodes", "1", "--time", "1:00\n#SBATCH --x"],
        r"argument --time: .* is not a time limit",
    ),
    (
        ["slurm", *TINY, "--nodes", "1", "--name", "x$(id)"],
        r"argument --name: name='x\$\(id\)' cannot",
    ),
    # -- fit / parity
    # -----------------------------------------------------------------------------------
    (["fit", *TINY, "--lo", "10", "--hi", "1"], r"--lo 10 is above --hi 1"),
    (["fit", *TINY, "--vary", "heads"], r"argument --vary: invalid choice: 'heads'"),
    (["fit", *TINY, "--lo", "0"], r"argument --lo: 0 is too small"),
    (["fit", *TINY, "--step", "0"], r"argument --step: 0 is too small"),
    (
        ["fit", *TINY, "--vary", "seq", "--lo", "1", "--hi", "100"],
        r"no multiple of 128 in \[1, 100\]",
    ),
    (["parity", *TINY, "--repeats", "0"], r"argument --repeats: 0 is too small"),
    # -- prepare-data
    # -----------------------------------------------------------------------------------
    (
        ["prepare-data", "--input", "{tmp}/missing.jsonl", "--output-prefix", "{tmp}/out"],
        r"missing.jsonl: no such file: pass a JSON Lines file",
    ),
    (
        ["prepare-data", "--input", "{tmp}/no_text.jsonl", "--output-prefix", "{tmp}/out"],
        r"no_text.jsonl:1: no text in field 'text'",
    ),
    (
        [
            "prepare-data",
            "--input",
            "{tmp}/corpus.jsonl",
            "--output-prefix",
            "{tmp}/out",
            "--tokenizer",
            "/no/such",
        ],
        r"tokenizer '/no/such': pass 'byte' or the folder",
    ),
    (
        ["prepare-data", "--input", "x.jsonl"],
        r"the following arguments are required: --output-prefix",
    ),
    # -- peer --------------------------------------------------------------------------------------
    (["peer", *TINY, "--tp", "2", "--gpus", "3"], r"gpus=3 is not divisible by tp\*pp\*cp=2"),
    (["peer", *TINY, "--megatron-lm", "{tmp}/nowhere"], r"nowhere"),
    # -- bench -------------------------------------------------------------------------------------
    (["bench", "--gpus", "0"], r"megalab bench: error: argument --gpus: 0 is too small"),
    (["bench", "--nope"], r"megalab bench: error: unrecognized arguments: --nope"),
    (["bench", "--gpus", "3"], r"needs at least one CUDA GPU|this machine has \d+ GPU"),
    (["bench", "--gpus", "\u0664"], r"argument --gpus: .* is not a number in digits 0-9"),
    (["MEGALAB_COMMIT=\x1b]0;x\x07", "bench"], r"MEGALAB_COMMIT=.* is not a commit name"),
    # -- numbers: ASCII digits only, within what the trainer takes
    # ---------------------------------------
    (["plan", "--gpus", "\u0664"], r"argument --gpus: invalid int value"),
    (["plan", "--gpus", "1_0"], r"argument --gpus: invalid int value: '1_0'"),
    (["plan", "--tp", "\u00b2"], r"argument --tp: invalid int value"),
    (["plan", "--lr", "\u0663e-4"], r"argument --lr: invalid float value"),
    (["plan", "--lr", "1_0"], r"argument --lr: invalid float value: '1_0'"),
    (["plan", *TINY, "--seed", "-1"], r"seed=-1 must be a whole number from 0 to 4294967295"),
    (["plan", *TINY, "--seed", str(2**64)], r"seed=18446744073709551616 must be a whole number"),
    (["run", *TINY, "--mode", "cached", "--seed", str(2**32)], r"seed=4294967296 must be"),
    (["run", *TINY, "--gpus", "1_0"], r"argument --gpus: invalid int value"),
    (
        ["run", *TINY, "--timeout", "\u0664"],
        r"argument --timeout: .* is not a number in digits 0-9",
    ),
    (["run", *TINY, "--nnodes", "\u0662"], r"argument --nnodes: .* is not a number in digits 0-9"),
    (["fit", *TINY, "--hi", "\u0666\u0664"], r"argument --hi: .* is not a number in digits 0-9"),
    (["parity", *TINY, "--repeats", "1_0"], r"argument --repeats: '1_0' is not a number"),
    (
        ["experiments", "ch01", "--gpus", "\u0662"],
        r"argument --gpus: .* is not a number in digits 0-9",
    ),
    (["reproduce", "--gpus", "\u0664"], r"argument --gpus: .* is not a number in digits 0-9"),
    (
        ["reproduce", "01", "--gpus", "3"],
        r"--gpus 3: the chapters' layouts scale over powers of two",
    ),
    (
        ["reproduce", "--gpus", "6", "--mode", "live"],
        r"--gpus 6: the chapters' layouts scale over powers of two",
    ),
    (
        ["fit", *TINY, "--mode", "cached", "--hi", "99999999999999"],
        r"holds 99,999,999,999,999 multiples of 1: narrow",
    ),
    (
        ["fit", *TINY, "--vary", "seq", "--mode", "cached", "--hi", "99999999"],
        r"multiples of 128: narrow it to 4096",
    ),
    # -- names and sbatch values
    # --------------------------------------------------------------------------
    (["plan", "--name", "a" * 300], r"\(300 characters\) cannot name a run folder: use 64 at most"),
    (
        ["run", *TINY, "--name", "b" * 65, "--mode", "cached"],
        r"\(65 characters\) cannot name a run folder",
    ),
    (
        ["slurm", *TINY, "--nodes", "1", "--time", "banana"],
        r"argument --time: 'banana' is not a time limit",
    ),
    (
        ["slurm", *TINY, "--nodes", "1", "--time", "1:00:00:00"],
        r"argument --time: '1:00:00:00' is not a time",
    ),
    (
        ["slurm", *TINY, "--nodes", "1", "--time", "01:00:00 "],
        r"argument --time: '01:00:00 ' is not a time",
    ),
    # -- the environment: a store, a runs folder, a commit that cannot be
    # ------------------------------
    (["MEGALAB_RESULTS={tmp}/nowhere", "results"], r"MEGALAB_RESULTS=.*nowhere: no such folder"),
    (
        ["MEGALAB_RESULTS={tmp}/a_file.txt", "results"],
        r"MEGALAB_RESULTS=.*a_file.txt: not a folder",
    ),
    (["MEGALAB_RESULTS=/dev/null", "results"], r"MEGALAB_RESULTS=/dev/null: not a folder"),
    (
        ["MEGALAB_RESULTS={tmp}/nowhere", "experiments", "ch01", "--missing"],
        r"MEGALAB_RESULTS=.*: no such folder",
    ),
    (
        ["MEGALAB_RESULTS={tmp}/nowhere", "run", *TINY, "--mode", "cached"],
        r"MEGALAB_RESULTS=.*: no such folder",
    ),
    (
        ["MEGALAB_RESULTS={tmp}/nowhere", "results", "--import", "{tmp}/good.jsonl"],
        r"MEGALAB_RESULTS=.*: no such",
    ),
    (
        ["MEGALAB_RUNS=/dev/null", "run", *TINY, "--dry-run"],
        r"runs folder /dev/null: cannot make .* there",
    ),
    (
        ["MEGALAB_RUNS={tmp}/a_file.txt", "run", *TINY, "--dry-run"],
        r"runs folder .*a_file.txt: cannot make",
    ),
    (
        ["MEGALAB_COMMIT=abc\n#SBATCH", "run", *TINY, "--mode", "live"],
        r"MEGALAB_COMMIT='abc\\n#SBATCH' is not a",
    ),
    (
        ["MEGALAB_COMMIT=a b", "run", *TINY, "--mode", "live"],
        r"MEGALAB_COMMIT='a b' is not a commit name",
    ),
    # -- store files that are not regular files
    # -----------------------------------------------------------
    (
        ["results", "--store", "{tmp}/runs_is_dir"],
        r"runs.jsonl: a folder, not a regular file: move it away",
    ),
    (["results", "--store", "{tmp}/fifo_store"], r"runs.jsonl: a FIFO, not a regular file"),
    (
        ["results", "--store", "{tmp}/link_store"],
        r"runs.jsonl: a symbolic link: the store reads and writes regular",
    ),
    (["results", "--store", "{tmp}/link_lock"], r"runs.jsonl.lock: a symbolic link"),
    (
        ["results", "--store", "{tmp}/runs_is_dir", "--import", "{tmp}/good.jsonl"],
        r"runs.jsonl: a folder",
    ),
    (
        ["results", "--store", "{tmp}/link_store", "--import", "{tmp}/good.jsonl"],
        r"runs.jsonl: a symbolic link",
    ),
    (["results", "--store", "{tmp}/fifo_store", "--kind", "run", "--json"], r"runs.jsonl: a FIFO"),
    (
        ["results", "--import", "{tmp}/fifo_store/runs.jsonl"],
        r"runs.jsonl: a FIFO, not a regular file: pass a JSON",
    ),
    (
        ["results", "--import", "{tmp}/runs_is_dir"],
        r"runs_is_dir: a folder, not a regular file: pass a JSON",
    ),
    # -- records that import refuses
    # -------------------------------------------------------------------
    (["results", "--import", "{tmp}/deep.jsonl"], r"deep.jsonl:2: nested deeper than 32 levels"),
    (
        ["results", "--import", "{tmp}/recursion.jsonl"],
        r"recursion.jsonl:1: not JSON \(RecursionError\)",
    ),
    (
        ["results", "--import", "{tmp}/huge.jsonl"],
        r"huge.jsonl:2: holds a whole number beyond 2\*\*63",
    ),
    (
        ["results", "--import", "{tmp}/escape_label.jsonl"],
        r"escape_label.jsonl:2: label holds a control character",
    ),
    (
        ["results", "--import", "{tmp}/escape_env.jsonl"],
        r"escape_env.jsonl:2: env.gpu_name holds a control",
    ),
    (
        ["results", "--import", "{tmp}/escape_tag.jsonl"],
        r"escape_tag.jsonl:2: tags\[1\] holds a control",
    ),
    (
        ["results", "--import", "{tmp}/escape_commit.jsonl"],
        r"escape_commit.jsonl:2: git_commit holds a control",
    ),
    (
        ["results", "--import", "{tmp}/escape_run_dir.jsonl"],
        r"escape_run_dir.jsonl:2: run_dir holds a control",
    ),
    (
        ["results", "--import", "{tmp}/escape_error.jsonl"],
        r"escape_error.jsonl:2: error.message holds a control",
    ),
    (
        ["results", "--import", "{tmp}/escape_invalid.jsonl"],
        r"escape_invalid.jsonl:2: config: name=.* cannot name",
    ),
    (
        ["results", "--import", "{tmp}/not_a_date.jsonl"],
        r"not_a_date.jsonl:2: recorded_at='not a date' is not a UTC",
    ),
    (
        ["results", "--import", "{tmp}/no_such_day.jsonl"],
        r"no_such_day.jsonl:2: recorded_at='2026-02-30T.*' is not",
    ),
    (
        ["results", "--import", "{tmp}/from_the_future.jsonl"],
        r"from_the_future.jsonl:2: .* is later than now",
    ),
    (
        ["results", "--import", "{tmp}/no_gpu_name.jsonl"],
        r"no_gpu_name.jsonl:2: env.gpu_name is missing",
    ),
    (
        ["results", "--import", "{tmp}/bench_no_env.jsonl"],
        r"bench_no_env.jsonl:1: env.gpu_name is missing",
    ),
    (
        ["results", "--import", "{tmp}/bench_gpu_count.jsonl"],
        r"bench_gpu_count.jsonl:1: env.gpu_count=\"many\"",
    ),
    (
        ["results", "--import", "{tmp}/bench_date.jsonl"],
        r"bench_date.jsonl:1: recorded_at='yesterday' is not",
    ),
    # -- prepare-data
    # ---------------------------------------------------------------------------------
    (
        ["prepare-data", "--input", "{tmp}/latin1.jsonl", "--output-prefix", "{tmp}/out"],
        r"latin1.jsonl:1: not UTF-8 \(byte 0xe9 at column 14\): convert the file",
    ),
    (
        [
            "prepare-data",
            "--input",
            "{tmp}/corpus.jsonl",
            "--output-prefix",
            "{tmp}/a_file.txt/out",
        ],
        r"--output-prefix .*a_file.txt/out: cannot make its folder",
    ),
]
