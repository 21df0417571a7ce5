"""Input: record formats, pipelines, Pipe-mode FIFOs and the data tools."""
