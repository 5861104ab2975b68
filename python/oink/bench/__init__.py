"""`oink-bench` (or `python -m oink.bench`): oink against torch and whatever peers are installed.

Method: each provider's outputs are first checked against a float64 reference (relative L2 error
within 4 units of roundoff of the output's dtype; non-finite output fails); only then is it
timed. GPU: device time per call = median over replays of one CUDA graph cycling over rotating
buffer sets larger than 2x the L2 (regime hbm), or over 4 L2-resident sets (regime l2, decode
batches), with the fastest and slowest replay as the spread; % of the device-to-device copy
ceiling measured in the same run. Steps of milliseconds (linear_cross_entropy, with its peak
memory) and peers' steps that a graph cannot hold: eager calls between CUDA events. CPU: the same
cases on small shapes, host-timed.

Modules: providers (what is timed), references (float64 references and the gate), measure
(clocks and the copy ceiling), cases (shapes and the run loop), report (JSON, Markdown, plots).
"""
