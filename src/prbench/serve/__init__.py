"""The reward server: a prbench RM behind HTTP for RL trainers, in their own protocols.

- `prbench.serve.service`: (user context, answer) -> reward through `prbench.context.conditions`; no HTTP.
- `prbench.serve.protocols`: the wire formats (prbench `/score`, OpenRLHF `/get_reward`, vLLM pooling).
- `prbench.serve.server`: the ASGI app (`create_app`), `serve`, `ThreadedServer`.
- `prbench.serve.guard`: connection cap and deadlines (uvicorn's protocol, wrapped).
- `prbench.serve.batcher`: items of concurrent requests scored in one RM call.
- `prbench.serve.replicas`: N model copies behind Ray Serve.
- `prbench.serve.client`: one reward call, to a running server or to an in-process service.
- `prbench.serve.items`, `prbench.serve.chat`: the user context a training row carries, and
  the answer cut out of the text a trainer sends.

It imports no metric driver (`prbench.downstream`), and none imports it.
"""
