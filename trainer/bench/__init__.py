"""The shipped benchmarks, one module each (`trainer bench NAME`, trainer.commands.bench)."""
