"""contextfold server: memory context injection for agents, over gRPC."""

import os

# The server's arrays are small (a question's candidates and their words, `weighing.alone`): the BLAS library's own
# threads would only take turns with the event loop and the model's for no gain. Beside a busy core they took a
# product of 150 candidates' words from 0.7 ms to 12 ms at the 99th percentile. Set before numpy loads (any module of
# the server's); an operator's own setting stands.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
