"""Experiments over many runs: seed × config sweeps, statistics over seeds and tasks, hyper-parameter search.

Every run is an ordinary ``lightmarl fit`` (then ``lightmarl validate``) subprocess in its own run
directory; this package decides which runs to start, starts them, and reads what they wrote
(checkpoints, metrics files). It knows no algorithm and no game.

- :mod:`~lightmarl.experiments.spec`: the sweep YAML (:class:`SweepSpec`) and the runs it expands to;
- :mod:`~lightmarl.experiments.runner`: runs a sweep in parallel, resumably (``lightmarl sweep``);
- :mod:`~lightmarl.experiments.statistics`: rliable's aggregates with stratified bootstrap intervals;
- :mod:`~lightmarl.experiments.report`: a sweep's report, tables and plots (``lightmarl sweep --report``);
- :mod:`~lightmarl.experiments.tune`: Optuna studies over recipe keys (``lightmarl tune``).
"""
