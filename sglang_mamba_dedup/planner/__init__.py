"""``sglang-mamba-dedup plan``: SGLang's own mamba sizing on the CPU, stock and with the plugin, from a model and its
launch flags. Never imported on the serving path.

* :mod:`.plan`: the command and the plan document (``--json``); :mod:`.args` its options; :mod:`.render` its text;
* :mod:`.model`: the model's state shape and weights from ``config.json`` and the safetensors headers;
* :mod:`.launch_config`: a pasted ``launch_server`` line resolved by SGLang's own parser for a CUDA GPU, and what
  the load adds to the checkpoint;
* :mod:`.sglang_estimate`: SGLang's estimator of the installed release, called offline.
"""
