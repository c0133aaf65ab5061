"""Local training, what one client does with a job: the training loop
(:mod:`fedselect.fl.local.train`), the client's job and result (:mod:`~fedselect.fl.local.clients`),
the local-objective hook (:mod:`~fedselect.fl.local.objective`), fine-tuning
(:mod:`~fedselect.fl.local.finetune`), the worker pool (:mod:`~fedselect.fl.local.pool` and its
``pool_*`` parts, the rule that decides its size in :mod:`~fedselect.fl.local.pool_rule`), where
training can run (:mod:`~fedselect.fl.local.placement`: cores, worker processes, device) and the
stacked path that trains several clients at once (:mod:`~fedselect.fl.local.batched`). Knows no
round and no method."""
