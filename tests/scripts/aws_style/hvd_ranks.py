"""AWS's basic Horovod check: every rank writes its local rank, rank and size into the
model folder, in a file named after them."""
import json
import os

import horovod.tensorflow as hvd

hvd.init()
seen = {"local-rank": hvd.local_rank(), "rank": hvd.rank(), "size": hvd.size()}
print(seen, flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"local-rank-{hvd.local_rank()}-rank-{hvd.rank()}"), "w") as f:
    json.dump(seen, f)
