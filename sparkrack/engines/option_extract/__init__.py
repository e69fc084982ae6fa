"""Every option string an engine's command line accepts, read from its wheel or, inside its
image, from the installed package: the one extractor of the option tables.

    python -m sparkrack.engines.option_extract WHEEL          # tools/engine_options.py too
    python3 -m option_extract --installed sglang              # in the image (engines.learn)

`invoke engines.learn` copies this package (its files only: common.py, the AST helpers;
sglang.py and vllm.py, each engine's parser; cli.py, the table and the command line) into
a container of the engine's image on the head
node and runs it there with the image's own Python, without a network and without a GPU:
it reads the sources of the package the image has installed (found with
importlib.util.find_spec, nothing imported) and the version from its installed metadata.
Stdlib only, Python 3.9 or later, so that it runs under whatever Python an image ships;
its modules import each other relatively, so the package runs under any name.

Nothing from the engine is imported or run (the engines need torch and a GPU): the argparse
definitions are read statically with `ast`, following the code that builds each parser.

- SGLang (`python3 -m sglang.launch_server` = `prepare_server_args`): the input namespaces
  listed in `sglang/srt/server_args.py` (`_INPUT_NAMESPACES`), each a class of
  `sglang/srt/arg_groups/fields/*.py` whose `A[T, help]` / `A[T, Arg(...)]` fields become
  `--kebab-name` (or `Arg(cli_name=...)`, plus `aliases`; `no_cli` fields have none), as
  `arg_groups/arg_utils.add_cli_args_from_dataclass` does; then the `parser.add_argument`
  calls of `ServerArgs.add_cli_args`.
- vLLM (`vllm serve`): `make_arg_parser` of `vllm/entrypoints/common/cli_args.py` (its own
  `add_argument` calls, then every field of `FrontendArgs` and its bases as
  `--kebab-name`), then the `add_argument` calls of `EngineArgs.add_cli_args` and
  `AsyncEngineArgs.add_cli_args` in `vllm/engine/arg_utils.py`, whose `**kwargs["field"]`
  come from `get_kwargs(ConfigClass)`: a field whose type admits bool becomes a
  BooleanOptionalAction, which vLLM's parser registers as EnableDisableAction
  (`--x`, `--no-x`, and for `--enable-x`/`--disable-x` the other one too).

Checked when the lists were first made (sglang 0.5.22, vllm 0.33.0): the same options,
each taking the same kind of value, as the parsers the engines' own code builds when
imported with their third-party dependencies (torch, ...) faked (SGLang: the namespace
fields through `add_cli_args_from_dataclass`, 536 option strings; vLLM: the whole
`vllm serve` parser, 483).

Output, one option string a line: `OPTION TAKES [PRIMARY]`, TAKES being `value`, `none`
(a switch) or `optional` (nargs ? or *), PRIMARY the first option string of the same
argument when OPTION is another name for it (an alias or a short option). Negative forms
(`--no-x`, `--disable-x`) are listed as their own switches. argparse's own -h/--help are
left out. Header lines `#: key value` say what the parser does with unknown spellings.
Anything the reader could not follow is reported on stderr and makes the exit code 1.
"""
