"""The idle-GPU admission controller: the box's owner comes first.

- `policy`: the state machine (serving, throttled, draining, yielded), pure;
- `queue`: who runs next (priority, fairness, each model's cap and token budget), pure;
- `lending`: the weekly windows the owner lends the GPU in;
- `probes`: how busy the owner is (NVML, none, scripted);
- `runtime`: samples the probe, drives the state machine, pauses the engine;
- `lease`: admission as a lease around one generation (`controller.lease(request)`),
  and `admitted`, an engine's stream inside one;
- `deferred`: the deferred lane's accounting (what batch lines may take), pure;
- `report`: the controller's snapshot and each model's load.

May import: the standard library and `engine`'s core (protocol, checks, errors). Never vLLM
or the web stack: the probe and the policy run on GPU machines without them.
"""
