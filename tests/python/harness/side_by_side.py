"""Trains the same model under two process groups side by side (collops and gloo), same data, and
compares their parameters after every step: the shared loop of the DDP and FSDP2 tests."""

import torch


def train_side_by_side(rank, nets, steps, shapes, lr, full=lambda p: p):
    """nets: {"collops": module, "gloo": module}; shapes: (x shape, y shape) of a batch, drawn
    from a generator seeded with `rank`; full(p): a parameter as one tensor (FSDP2: full_tensor).
    Returns how many parameter pairs were compared."""
    opts = {
        name: torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9) for name, net in nets.items()
    }
    data = torch.Generator().manual_seed(rank)
    compared = 0
    for _ in range(steps):
        x, y = (torch.randn(*s, generator=data) for s in shapes)
        for name, net in nets.items():
            opts[name].zero_grad()
            torch.nn.functional.mse_loss(net(x).float(), y).backward()
            opts[name].step()
        for (n, p), q in zip(nets["collops"].named_parameters(), nets["gloo"].parameters()):
            torch.testing.assert_close(full(p), full(q), rtol=1e-6, atol=1e-6, msg=n)
            compared += 1
    return compared
