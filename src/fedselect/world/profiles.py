"""Named fleets (``system.profiles``): device and network tables with the share of clients on each.

* ``paper``: FLASH-RL Tables II and III (:data:`fedselect.world.system.DEFAULT_DEVICES`,
  :data:`~fedselect.world.system.DEFAULT_NETWORKS`), assigned round-robin (the default).
* ``flashrl-code``: the fleet pickled in the FLASH-RL authors' code, ``clients_info/CIFAR10/``
  (``names_list.pkl``, ``cores_list.pkl``, ``frequency_list.pkl``, ``bandwidth_list.pkl``: 100
  clients, each with 1,000 pre-drawn CPU frequencies and bandwidths; their tutorial and servers
  draw one of them per round). ``clients_info/MobiAct/`` holds the same table for 50 clients, half
  the counts. The rows below are the clients' device names and core counts as pickled, with the
  mean and standard deviation that generated their samples (the pooled samples of each row agree
  with them: means within 0.5 MHz and 0.4 Mb/s, standard deviations within 0.9; docs/flash-rl.md
  lists them), and the mix is the number of the 100 clients on each row.

It differs from the paper's tables in core counts (Jetson AGX Xavier 512 not 384, FPGA ZCU102 2
not 4, Intel i3 1 not 2, i5 2 not 4, and half of the Raspberry Pi 3 have 2 cores), in the
Xavier NX 15 W's frequency (1,110 MHz, the table 1,100) and Wi-Fi 3's bandwidth (30 Mb/s, the
table 33), and in its shares (4 Jetson Nano, 8 of every other device row; 24 or 26 clients on
each network).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedselect.world.system import DEFAULT_DEVICES, DEFAULT_NETWORKS, DeviceProfile, NetworkProfile


@dataclass(frozen=True)
class ProfilePreset:
    """A named fleet: the tables and the clients' shares by profile name (None: round-robin)."""

    devices: tuple[DeviceProfile, ...]
    networks: tuple[NetworkProfile, ...]
    device_mix: dict[str, float] | None = None
    network_mix: dict[str, float] | None = None


#: the FLASH-RL authors' device rows (``clients_info/CIFAR10``): name, mean MHz, std MHz, cores
FLASHRL_CODE_DEVICES: tuple[DeviceProfile, ...] = tuple(
    DeviceProfile(*row)
    for row in [
        ("jetson-nano", 921, 20, 128),
        ("jetson-tx2", 1300, 20, 256),
        ("xavier-nx-10w", 800, 20, 384),
        ("xavier-nx-15w", 1110, 20, 384),
        ("jetson-agx-xavier", 1377, 20, 512),
        ("raspberry-pi-3-2c", 350, 20, 2),
        ("raspberry-pi-3", 350, 20, 4),
        ("fpga-zcu102", 1500, 20, 2),
        ("tpu-v1", 700, 20, 1),
        ("intel-i3", 3950, 10, 1),
        ("intel-i5", 4300, 50, 2),
        ("intel-i7", 4400, 80, 4),
        ("intel-i9", 4400, 100, 8),
    ]
)
#: clients of the authors' 100 on each device row
FLASHRL_CODE_DEVICE_MIX: dict[str, float] = {d.name: (4.0 if d.name == "jetson-nano" else 8.0) for d in FLASHRL_CODE_DEVICES}
#: the authors' network rows: name, mean Mb/s, std Mb/s
FLASHRL_CODE_NETWORKS: tuple[NetworkProfile, ...] = tuple(
    NetworkProfile(*row) for row in [("wifi-1", 6, 1), ("wifi-3", 30, 5), ("fast-ethernet", 100, 10), ("wifi-4", 336, 50)]
)
#: clients of the authors' 100 on each network row
FLASHRL_CODE_NETWORK_MIX: dict[str, float] = {"wifi-1": 24.0, "wifi-3": 26.0, "fast-ethernet": 24.0, "wifi-4": 26.0}

#: ``system.profiles`` -> its fleet
PROFILE_PRESETS: dict[str, ProfilePreset] = {
    "paper": ProfilePreset(DEFAULT_DEVICES, DEFAULT_NETWORKS),
    "flashrl-code": ProfilePreset(FLASHRL_CODE_DEVICES, FLASHRL_CODE_NETWORKS, FLASHRL_CODE_DEVICE_MIX, FLASHRL_CODE_NETWORK_MIX),
}
