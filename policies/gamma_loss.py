"""MELINOE's cache-simulation loss (Appendix C) over router outputs, in torch: for fine-tuning routers
so that a γ-cache of C experts per layer misses less.

For one sequence of T tokens and L layers, with r_t the request vector of token t at a layer (its
Top-K experts) and Count_{t+1} = γ·Count_t + r_t (eq. 8):

- ``hard_loss`` is eq. 10, (1 / LT) Σ_{t,ℓ} <r_t, 1 − C_t> with C_t = Top-C(Count_t) (eq. 9): the γ-cache's
  misses per token and layer. It plays the cache exactly as ``moesim.policies.gamma`` does (counts
  from 0 and the cache empty; ties to the expert served more recently, a step's hits before its
  misses; a step's hits stay), so L·T times it is the simulator's miss count for the sequence
  (step semantics, per-layer scope). It is a count, with no gradient.
- ``soft_loss`` replaces C_t by the soft cache c_t = Count_t · C / max(C, ||Count_t||_1): eq. 11's
  Count_t / ||Count_t||_1 · C once the counts' mass reaches C, and Count_t itself before (the
  "cache fill" phase of §3.2, which starts from c = 0; Appendix C instead starts Count_1 at mass C,
  which would count experts never requested as cached). It is differentiable in r, which may be
  relaxed to [0, 1]^E (the paper's r ∈ [0,1]^E); ``requests`` gives the Top-K mask of router
  probabilities with a straight-through gradient, as the paper leaves open how r carries one.

All tensors are [T, L, ...]; torch is imported by the caller (``pip install 'moesim[torch]'``).
"""

from __future__ import annotations

import numpy as np


def requests(probs, k: int, straight_through: bool = True):
    """The Top-K request vectors of router probabilities ``probs`` [T, L, E]: (ranked expert ids
    [T, L, K], most probable first, and the 0/1 mask [T, L, E]). With ``straight_through`` the mask's
    gradient is that of ``probs`` (its value stays 0/1)."""
    import torch

    ranked = torch.topk(probs, k, dim=-1).indices
    mask = torch.zeros_like(probs).scatter(-1, ranked, 1.0)
    if straight_through:
        mask = mask + (probs - probs.detach())  # exactly 0 in value
    return ranked, mask


def soft_loss(mask, capacity: int, gamma: float = 0.9):
    """eq. 4 / 11: the mean over tokens and layers of <r_t, 1 − c_t> for request vectors ``mask``
    [T, L, E] (0/1 or relaxed), c_t the soft cache of ``capacity`` experts per layer."""
    import torch

    n = mask.shape[0]
    t = torch.arange(n, dtype=mask.dtype, device=mask.device)
    gap = t[:, None] - 1 - t[None, :]  # Count_t = Σ_{s<t} γ^(t-1-s) r_s
    decay = torch.where(gap >= 0, torch.as_tensor(gamma, dtype=mask.dtype).pow(gap.clamp(min=0)),
                        torch.zeros((), dtype=mask.dtype))
    count = torch.einsum("ts,sle->tle", decay, mask)
    mass = count.sum(-1, keepdim=True)
    cache = count * capacity / torch.clamp(mass, min=capacity)
    return (mask * (1 - cache)).sum(-1).mean()


def hard_loss(ranked, num_experts: int, capacity: int, gamma: float = 0.9):
    """eq. 10 for the ranked requests ``ranked`` [T, L, K] (``requests``' first output): the γ-cache's
    misses per token and layer (no gradient). Per layer: ``hard_misses``."""
    misses = hard_misses(ranked, num_experts, capacity, gamma)
    return misses.sum().double() / (ranked.shape[0] * ranked.shape[1])


def hard_misses(ranked, num_experts: int, capacity: int, gamma: float = 0.9):
    """The γ-cache's misses per layer (int64 [L]) over the sequence ``ranked`` [T, L, K]."""
    import torch

    ranked = ranked.detach().long().cpu()
    n, n_layers, k = ranked.shape
    decay = torch.from_numpy(np.power(gamma, np.arange(n + 1, dtype=np.float64)))  # as the policy tabulates it
    count = torch.zeros(n_layers, num_experts, dtype=torch.float64)  # at its last update
    last = torch.zeros(n_layers, num_experts, dtype=torch.long)
    served = torch.full((n_layers, num_experts), -1, dtype=torch.long)
    resident = torch.zeros(n_layers, num_experts, dtype=torch.bool)
    misses = torch.zeros(n_layers, dtype=torch.long)
    for t in range(n):
        req = ranked[t]
        hit = resident.gather(1, req)
        misses += (~hit).sum(1)
        # served in rank order, the hits before the misses: each request's place in that order
        place = torch.where(hit, hit.cumsum(1) - 1, hit.sum(1, keepdim=True) + (~hit).cumsum(1) - 1)
        served.scatter_(1, req, t * k + place)
        count.scatter_(1, req, count.gather(1, req) * decay[t - last.gather(1, req)] + 1.0)
        last.scatter_(1, req, torch.full_like(req, t))
        in_req = torch.zeros_like(resident).scatter_(1, req, True)
        hits = torch.zeros_like(resident).scatter_(1, req, hit)
        # the hits stay; the other residents and the misses compete for the remaining slots
        candidate = (resident & ~in_req) | (in_req & ~hits)
        room = capacity - hits.sum(1, keepdim=True)
        score = torch.where(candidate, count * decay[t - last], torch.full_like(count, -1.0))
        order = torch.argsort(served, dim=1, descending=True, stable=True)
        order = order.gather(1, torch.argsort(score.gather(1, order), dim=1, descending=True, stable=True))
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(num_experts).expand(n_layers, -1))
        resident = hits | (candidate & (rank < room))
    return misses
