"""`python -m cli`: the same as the `durable-rag` console script."""

from cli import main

main()
