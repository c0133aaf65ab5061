"""A generator of **synthetic** IoT flow records (the ``iot-synthetic`` data set). Not real traffic.

The UNSW traces the budgeted-online paper uses cannot be obtained here, so ``iot-synthetic``
(:mod:`fedselect.world.data.iot`) draws flows from invented per-device-type behaviour:
:class:`DeviceType`, the ten :data:`SYNTHETIC_DEVICE_TYPES` (plus nine :data:`EXTRA_DEVICE_TYPES`
for the authors' 19 classes) and :func:`synthetic_iot_flows`, which gives a table in the
flow-record format of :mod:`fedselect.world.data.iot_flows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: pandas is slow to import
    import pandas as pd

from fedselect.world.data.iot_flows import DNS_PORT, FLOW_COLUMNS, NTP_PORT

__all__ = ["EXTRA_DEVICE_TYPES", "MAX_DEVICE_TYPES", "SYNTHETIC_DEVICE_TYPES", "DeviceType", "synthetic_iot_flows"]


@dataclass(frozen=True)
class DeviceType:
    """Behaviour of one synthetic IoT device type (per hour of a 3600 s window).

    Attributes:
        name: type name.
        flows_per_hour: mean number of data flows per active hour (Poisson).
        active_prob: probability that an hour has data flows at all (else only DNS/NTP).
        duration: mean data-flow duration, seconds (exponential).
        bytes_per_flow: median bytes per data flow (log-normal, sigma 0.8).
        packet_size: mean bytes per packet.
        servers: number of remote servers it talks to.
        ports: remote ports of its data flows.
        dns_period: seconds between DNS look-ups (jittered), ``0`` = never.
        dns_names: number of distinct names it looks up.
        ntp_period: seconds between NTP syncs (jittered), ``0`` = never.
    """

    name: str
    flows_per_hour: float
    active_prob: float
    duration: float
    bytes_per_flow: float
    packet_size: float
    servers: int
    ports: tuple[int, ...]
    dns_period: float
    dns_names: int
    ntp_period: float


#: Ten synthetic device types loosely modelled on the device classes of the UNSW smart-home
#: testbed (cameras, plugs, sensors, speakers, hubs ...). The numbers are invented.
SYNTHETIC_DEVICE_TYPES: tuple[DeviceType, ...] = (
    DeviceType("camera", 40, 0.95, 60.0, 2e6, 1100, 3, (443, 554), 600, 3, 3600),
    DeviceType("baby-monitor", 25, 0.8, 90.0, 8e5, 900, 2, (443, 8080), 900, 2, 3600),
    DeviceType("smart-plug", 6, 0.9, 2.0, 900, 120, 1, (443,), 1800, 1, 7200),
    DeviceType("smart-bulb", 4, 0.6, 3.0, 1500, 150, 1, (1883,), 1200, 1, 0),
    DeviceType("motion-sensor", 10, 0.5, 1.0, 400, 90, 1, (443,), 3600, 1, 14400),
    DeviceType("smart-speaker", 20, 0.7, 20.0, 1.5e5, 700, 6, (443, 80, 4070), 300, 8, 3600),
    DeviceType("hub", 30, 1.0, 5.0, 6000, 200, 4, (443, 8883, 5683), 450, 4, 1800),
    DeviceType("weather-station", 3, 1.0, 4.0, 3000, 300, 1, (80,), 3600, 1, 3600),
    DeviceType("smoke-alarm", 2, 0.4, 2.0, 1200, 180, 2, (443, 11095), 7200, 2, 7200),
    DeviceType("photo-frame", 8, 0.6, 40.0, 3e5, 1000, 2, (80, 443), 1200, 3, 0),
)

#: Nine more invented types, so that ``iot-synthetic`` can have the 19 device classes of the
#: budgeted-online authors' data (option ``device_types: 19``). Also synthetic.
EXTRA_DEVICE_TYPES: tuple[DeviceType, ...] = (
    DeviceType("doorbell", 12, 0.7, 30.0, 4e5, 950, 2, (443, 9543), 900, 2, 3600),
    DeviceType("thermostat", 5, 1.0, 3.0, 2500, 250, 2, (443, 9443), 1800, 2, 3600),
    DeviceType("smart-lock", 2, 0.5, 1.5, 700, 110, 1, (443, 8443), 3600, 1, 7200),
    DeviceType("smart-tv", 35, 0.5, 120.0, 5e6, 1300, 8, (443, 80, 1935), 240, 10, 3600),
    DeviceType("printer", 3, 0.3, 10.0, 6e4, 600, 1, (631, 443), 1800, 2, 0),
    DeviceType("smart-scale", 1, 0.2, 5.0, 2000, 200, 1, (443,), 7200, 1, 3600),
    DeviceType("sleep-sensor", 15, 0.6, 8.0, 1e4, 350, 1, (443, 8883), 2400, 1, 1800),
    DeviceType("light-switch", 5, 0.7, 1.0, 500, 100, 1, (1883, 443), 1200, 1, 14400),
    DeviceType("air-purifier", 4, 0.9, 6.0, 5000, 280, 2, (443, 5683), 2700, 2, 7200),
)

#: the most device types ``iot-synthetic`` can have (``device_types``)
MAX_DEVICE_TYPES = len(SYNTHETIC_DEVICE_TYPES) + len(EXTRA_DEVICE_TYPES)


def synthetic_iot_flows(
    rng: np.random.Generator,
    windows: int = 200,
    window: float = 3600.0,
    devices_per_type: int = 1,
    types: tuple[DeviceType, ...] = SYNTHETIC_DEVICE_TYPES,
    jitter: float = 0.15,
) -> pd.DataFrame:
    """A **synthetic** flow-record table (columns :data:`~fedselect.world.data.iot_flows.FLOW_COLUMNS`) for IoT devices.

    Each device is an instance of a :class:`DeviceType` whose rates are multiplied by a
    per-device factor in ``[1 - jitter, 1 + jitter]``. Per window: with probability
    ``active_prob`` a Poisson number of data flows at uniform times (exponential durations,
    log-normal sizes, packets = bytes / packet size, a random server from its own pool and a
    port from its list); DNS flows every ``dns_period`` (+-20% jitter) asking one of its names;
    NTP flows every ``ntp_period``. Devices are named ``"<type>-<k>"``.

    Args:
        rng: seeded generator (the only randomness).
        windows: number of ``window``-second periods simulated per device.
        window: period length in seconds (features use the same length by default).
        devices_per_type: instances of every type (distinct classes).
        types: the device types.
        jitter: per-device relative spread of the rates, in [0, 1).

    Returns:
        DataFrame, one row per flow, start times in seconds from 0, sorted by start.

    Raises:
        ValueError: non-positive windows/window/devices_per_type, jitter outside [0, 1).
    """
    import pandas as pd

    if windows < 1 or devices_per_type < 1 or not window > 0:
        raise ValueError(f"need windows >= 1, devices_per_type >= 1, window > 0; got {windows}, {devices_per_type}, {window}")
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")
    horizon = windows * window
    frames = []
    for t_i, dt in enumerate(types):
        for k in range(devices_per_type):
            frames.append(_device_flows(rng, dt, t_i, k, windows, window, horizon, jitter))
    out = pd.concat(frames, ignore_index=True)
    out = out.sort_values(["start", "device"], kind="stable").reset_index(drop=True)
    return out[list(FLOW_COLUMNS)]


def _device_flows(
    rng: np.random.Generator, dt: DeviceType, t_i: int, k: int, windows: int, window: float, horizon: float, jitter: float
) -> pd.DataFrame:
    """Device ``k`` of type ``dt`` (the ``t_i``-th type): its data flows, then its DNS and NTP
    flows, with a ``device`` column ``"<type>-<k>"`` first. Draws its 4 rate factors first."""
    import pandas as pd

    f = 1.0 + rng.uniform(-jitter, jitter, size=4)
    name = f"{dt.name}-{k}"
    servers = [f"10.{t_i}.{k}.{s + 1}" for s in range(dt.servers)]
    parts = [_data_flows(rng, dt, f, servers, windows, window)]
    for period, port in ((dt.dns_period, DNS_PORT), (dt.ntp_period, NTP_PORT)):
        if period <= 0:
            continue
        parts.append(_periodic_flows(rng, dt, period, port, horizon))
    dev = pd.concat(parts, ignore_index=True)
    dev.insert(0, "device", name)
    return dev


def _data_flows(
    rng: np.random.Generator, dt: DeviceType, f: np.ndarray, servers: list[str], windows: int, window: float
) -> pd.DataFrame:
    """One device's data flows over ``windows`` windows (rates scaled by its factors ``f``):
    per window, with probability ``active_prob``, a Poisson number of flows at uniform times."""
    import pandas as pd

    hour = window / 3600.0
    active = rng.random(windows) < dt.active_prob
    n = rng.poisson(dt.flows_per_hour * f[0] * hour, size=windows) * active
    w_idx = np.repeat(np.arange(windows), n)
    start = (w_idx + rng.random(w_idx.size)) * window
    dur = rng.exponential(dt.duration * f[1], size=w_idx.size)
    size = np.maximum(60.0, rng.lognormal(np.log(dt.bytes_per_flow * f[2]), 0.8, size=w_idx.size))
    frac_out = rng.uniform(0.2, 0.8, size=w_idx.size)
    pkts = np.maximum(1, np.round(size / (dt.packet_size * f[3]))).astype(np.int64)
    return pd.DataFrame(
        {
            "start": start,
            "end": start + dur,
            "bytes_in": np.round(size * (1 - frac_out)).astype(np.int64),
            "bytes_out": np.round(size * frac_out).astype(np.int64),
            "packets": pkts,
            "dst_ip": np.asarray(servers)[rng.integers(0, len(servers), size=w_idx.size)],
            "dst_port": np.asarray(dt.ports)[rng.integers(0, len(dt.ports), size=w_idx.size)],
            "protocol": 6,
            "dns_query": "",
        }
    )


def _periodic_flows(rng: np.random.Generator, dt: DeviceType, period: float, port: int, horizon: float) -> pd.DataFrame:
    """One device's DNS (``port`` 53, asking one of its names) or NTP (123) flows: one every
    ``period`` seconds (+-20% jitter) from a uniform phase, up to ``horizon`` seconds."""
    import pandas as pd

    m = int(horizon / period) + 2
    gaps = period * rng.uniform(0.8, 1.2, size=m)
    t = rng.uniform(0, period) + np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    t = t[t < horizon]
    q = np.asarray([f"svc{j}.{dt.name}.example" for j in range(dt.dns_names)]) if port == DNS_PORT else None
    return pd.DataFrame(
        {
            "start": t,
            "end": t + rng.uniform(0.01, 0.2, size=t.size),
            "bytes_in": rng.integers(80, 300, size=t.size),
            "bytes_out": rng.integers(60, 120, size=t.size),
            "packets": 2,
            "dst_ip": "10.255.0.53" if port == DNS_PORT else "10.255.0.123",
            "dst_port": port,
            "protocol": 17,
            "dns_query": q[rng.integers(0, len(q), size=t.size)] if q is not None else "",
        }
    )
