"""`strata replay`: request timelines run through simulated slots under each slot policy.

Modules: `timeline` (the Request record, Mooncake and Strata readers, thinning), `generate` (agent-style
timelines), `simulator` (slots, an optional RAM cache below them, the count of prompt tokens read),
`policies` (each policy by name, the pure `slot_policy` ones through an adapter), `cli`.
Not here: any server, engine or real time; everything runs on token counts.
"""
