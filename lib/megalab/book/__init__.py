"""The book's side of the lib: what each chapter asks the GPUs for, and how its notebook executes.

chapters/     one module per chapter: every run it reads, by name
specs         the kinds of request a chapter makes: a run, a fit search, a parity pair, a profiled
run recording     the GPU host's recording plan, printed from the chapters (what results/ still
lacks) prose         the numbers the prose says ({eval}`name`), the same in JupyterLab and the HTML
reproduce     execute the notebooks, from the records or live
live          a live reproduction: resumed, timed, --quick's defining points
beside        a reproduction on fewer GPUs than the book's: the book's points, the reader's beside
widgets       the interactive planner
frame         what every rewritten chapter shows alike: layouts in words, the In Megatron-LM box,
tables
"""

from megalab.book import frame
from megalab.book.frame import describe, megatron_box, table

__all__ = ["frame", "describe", "megatron_box", "table"]
