"""Experiments over many runs: seed × config sweeps, statistics over seeds and tasks, hyper-parameter search.

Every run is an ordinary ``lightmarl fit`` (then ``lightmarl validate``) subprocess in its own run
directory; this package decides which runs to start, starts them, and reads what they wrote
(checkpoints, metrics files). It knows no algorithm and no game.

- `spec`: the sweep YAML (`SweepSpec`) and the runs it expands to;
- `runner`: runs a sweep in parallel, resumably (``lightmarl sweep``);
- `statistics`: rliable's aggregates with stratified bootstrap intervals;
- `report`: a sweep's report, tables and plots (``lightmarl sweep --report``);
- `tune`: Optuna studies over recipe keys (``lightmarl tune``).
"""
