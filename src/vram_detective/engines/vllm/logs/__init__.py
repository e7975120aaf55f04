"""vLLM's logs: the formats each release prints (formats.py, one row per format), the lines `explain` prints
from them (lines.py), the eras a log's format points to (eras.py) and the streaming reader that pulls every
figure out of a log of any era (reader.py, with patterns.py, records.py and runs.py). Importing this package is
light."""
