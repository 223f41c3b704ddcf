"""How a user tells fsdpskip about each training flow of flows.py (kept free
of torch: the test and the driver that launch the flows import it). A flow
of its own states it with `fsdpskip run --mode on`; accelerate's variables,
which the job sets with or without fsdpskip (they change what transformers
does), need no mode."""

ACCELERATE_FSDP = {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}
# Not trl-dpo: its Trainer's Accelerator refuses accelerate's FSDP variables
# on a machine without a GPU, so that flow states FSDPSKIP=on.
JOB_VARIABLES = {"from-pretrained": ACCELERATE_FSDP, "reward-unsynced": ACCELERATE_FSDP}
# axolotl sets accelerate's variables itself, from Python (setup_fsdp_envs).
FSDPSKIP_VARIABLES = {"from-pretrained": {}, "reward-unsynced": {}, "axolotl-fsdp2": {}, "axolotl-lora": {}}


def job_variables(flow, with_fsdpskip):
    """The launch environment's variables for one run of a flow."""
    variables = dict(JOB_VARIABLES.get(flow, {}))
    if with_fsdpskip:
        variables.update(FSDPSKIP_VARIABLES.get(flow, {"FSDPSKIP": "on"}))
    return variables
