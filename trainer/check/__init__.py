"""``zephyr train check``: what decides the accelerator run, measured on a CPU before a GPU is booked."""
