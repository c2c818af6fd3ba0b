"""Faked RDMA tools: ibv_devinfo, ibstat, rdma (iproute2). Formats: shared/reference/gpu-node-probes.md 4.1-4.3."""
import json
import sys

import simcommon

STATE_CODES = {"PORT_DOWN": 1, "PORT_INIT": 2, "PORT_ARMED": 3, "PORT_ACTIVE": 4}
IBSTAT_STATE = {"PORT_DOWN": "Down", "PORT_INIT": "Initializing", "PORT_ARMED": "Armed", "PORT_ACTIVE": "Active"}
RDMA_STATE = {"PORT_DOWN": "DOWN", "PORT_INIT": "INIT", "PORT_ARMED": "ARMED", "PORT_ACTIVE": "ACTIVE"}
RDMA_PHYS = {"LinkUp": "LINK_UP", "Disabled": "DISABLED", "Polling": "POLLING", "Sleep": "SLEEP",
             "PortConfigurationTraining": "PORT_CONFIGURATION_TRAINING", "LinkErrorRecovery": "LINK_ERROR_RECOVERY"}


def _out(text):
    sys.stdout.write(text)


def _ports(dev):
    return sorted(((int(k), v) for k, v in (dev.get("ports") or {}).items()))


def _lid(profile, ordinal, port):
    if port.get("link_layer") == "Ethernet":
        return 0
    if "lid" in port:
        return int(port["lid"])
    if port.get("state") != "PORT_ACTIVE":
        return 65535
    return 2 + 16 * int(profile["node"]["index"]) + ordinal


def _sm_lid(port):
    if port.get("link_layer") == "Ethernet" or port.get("state") != "PORT_ACTIVE":
        return 0
    return int(port.get("sm_lid", 1))


def _ordinals(profile):
    return {name: k for k, (name, _d) in enumerate(simcommon.rdma_devices(profile))}


def _ipv4(profile, ordinal):
    return "10.224.%d.%d" % (ordinal, 11 + int(profile["node"]["index"]))


def _gid_lines(profile, name, dev, ordinal, port):
    g = dev["node_guid"].replace(":", "")
    if port.get("link_layer") == "Ethernet":
        ll = "fe80::%s:%s:%s:%s" % (g[0:4].lstrip("0") or "0", g[4:8].lstrip("0") or "0",
                                    g[8:12].lstrip("0") or "0", g[12:16].lstrip("0") or "0")
        ip = "::ffff:" + _ipv4(profile, ordinal)
        gids = [(ll, "RoCE v1"), (ll, "RoCE v2"), (ip, "RoCE v1"), (ip, "RoCE v2")]
        return ["\t\t\tGID[%3d]:\t\t%s, %s" % (k, a, t) for k, (a, t) in enumerate(gids)]
    full = "fe80:0000:0000:0000:%s:%s:%s:%s" % (g[0:4], g[4:8], g[8:12], g[12:16])
    return ["\t\t\tGID[%3d]:\t\t%s" % (0, full)]


def _ibv_args(argv):
    """(device, port, verbose, list only) of an ibv_devinfo command line; IndexError/ValueError: a bad one."""
    dev_filter, port_filter, verbose, list_only = None, None, False, False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "--ib-dev"):
            i += 1
            dev_filter = argv[i]
        elif a.startswith("--ib-dev="):
            dev_filter = a.split("=", 1)[1]
        elif a in ("-i", "--ib-port"):
            i += 1
            port_filter = int(argv[i])
        elif a in ("-v", "--verbose"):
            verbose = True
        elif a in ("-l", "--list"):
            list_only = True
        else:
            raise ValueError(a)
        i += 1
    return dev_filter, port_filter, verbose, list_only


def _ibv_device_lines(name, dev, nports, verbose):
    out = ["hca_id:\t%s" % name,
           "\ttransport:\t\t\tInfiniBand (0)",
           "\tfw_ver:\t\t\t\t%s" % dev["fw_ver"],
           "\tnode_guid:\t\t\t%s" % dev["node_guid"],
           "\tsys_image_guid:\t\t\t%s" % dev["sys_image_guid"],
           "\tvendor_id:\t\t\t0x02c9",
           "\tvendor_part_id:\t\t\t%s" % dev["vendor_part_id"],
           "\thw_ver:\t\t\t\t%s" % dev.get("hw_ver", "0x0"),
           "\tboard_id:\t\t\t%s" % dev.get("board_id", "MT_0000000000"),
           "\tphys_port_cnt:\t\t\t%d" % nports]
    if verbose:
        out += ["\tmax_mr_size:\t\t\t0xffffffffffffffff", "\tpage_size_cap:\t\t\t0xfffffffffffff000",
                "\tmax_qp:\t\t\t\t131072", "\tmax_cq:\t\t\t\t16777216"]
    return out


def _ibv_port_lines(profile, ordinal, pnum, port):
    st = port.get("state", "PORT_ACTIVE")
    return ["\t\tport:\t%d" % pnum,
            "\t\t\tstate:\t\t\t%s (%d)" % (st, STATE_CODES.get(st, 0)),
            "\t\t\tmax_mtu:\t\t%s" % port.get("max_mtu", "4096 (5)"),
            "\t\t\tactive_mtu:\t\t%s" % port.get("active_mtu", "4096 (5)"),
            "\t\t\tsm_lid:\t\t\t%d" % _sm_lid(port),
            "\t\t\tport_lid:\t\t%d" % _lid(profile, ordinal, port),
            "\t\t\tport_lmc:\t\t0x00",
            "\t\t\tlink_layer:\t\t%s" % port.get("link_layer", "InfiniBand")]


def _ibv_lines(profile, devs, port_filter, verbose):
    ords = _ordinals(profile)
    out = []
    for name, dev in devs:
        ports = _ports(dev)
        out += _ibv_device_lines(name, dev, len(ports), verbose)
        for pnum, port in ports:
            if port_filter is not None and pnum != port_filter:
                continue
            out += _ibv_port_lines(profile, ords[name], pnum, port)
            if verbose:
                out += _gid_lines(profile, name, dev, ords[name], port)
        out.append("")
    return out


def ibv_devinfo(profile, argv):
    try:
        dev_filter, port_filter, verbose, list_only = _ibv_args(argv)
    except (IndexError, ValueError):
        sys.stderr.write("Usage: ibv_devinfo [-d device] [-i port] [-l] [-v]  (kimi-sim fake)\n")
        return 255
    devs = simcommon.rdma_devices(profile)
    if list_only:
        _out("%d HCA%s found:\n" % (len(devs), "" if len(devs) == 1 else "s") +
             "".join("\t%s\n" % n for n, _d in devs))
        return 0
    if dev_filter is not None:
        devs = [(n, d) for n, d in devs if n == dev_filter]
        if not devs:
            sys.stderr.write("IB device '%s' wasn't found\n" % dev_filter)
            return 255
    _out("\n".join(_ibv_lines(profile, devs, port_filter, verbose)) + "\n")
    return 0


def _hexguid(guid):
    return "0x" + guid.replace(":", "")


def ibstat(profile, argv):
    devs = simcommon.rdma_devices(profile, text_order=True)
    if argv[:1] in (["-l"], ["--list_of_cas"]):
        _out("".join(n + "\n" for n, _d in devs))
        return 0
    ports_only = argv[:1] in (["-p"], ["--port_list"])
    if ports_only:
        argv = argv[1:]
    if any(a.startswith("-") for a in argv):
        sys.stderr.write("Usage: ibstat [-l] [-p] [<ca_name>] [portnum]  (kimi-sim fake)\n")
        return 255
    if argv:
        devs = [(n, d) for n, d in devs if n == argv[0]]
        if not devs:
            sys.stderr.write("ibpanic: [%d] main: '%s' IB device can't be found: No such file or directory\n"
                             % (1, argv[0]))
            return 255
    want_port = int(argv[1]) if len(argv) > 1 else None
    ords = _ordinals(profile)
    out = []
    for name, dev in devs:
        ports = _ports(dev)
        if ports_only:
            out += [_hexguid(dev["node_guid"]) for _p in ports]
            continue
        if want_port is None:
            out += ["CA '%s'" % name,
                    "\tCA type: %s" % dev.get("ca_type", "MT4129"),
                    "\tNumber of ports: %d" % len(ports),
                    "\tFirmware version: %s" % dev["fw_ver"],
                    "\tHardware version: %d" % int(str(dev.get("hw_ver", "0x0")), 16),
                    "\tNode GUID: %s" % _hexguid(dev["node_guid"]),
                    "\tSystem image GUID: %s" % _hexguid(dev["sys_image_guid"])]
        for pnum, port in ports:
            if want_port is not None and pnum != want_port:
                continue
            st = port.get("state", "PORT_ACTIVE")
            ind = "\t\t" if want_port is None else "\t"
            if want_port is None:
                out.append("\tPort %d:" % pnum)
            else:
                out.append("Port %d:" % pnum)
            out += [ind + "State: %s" % IBSTAT_STATE.get(st, st),
                    ind + "Physical state: %s" % port.get("physical_state", "LinkUp"),
                    ind + "Rate: %s" % port.get("rate", 400),
                    ind + "Base lid: %d" % _lid(profile, ords[name], port),
                    ind + "LMC: 0",
                    ind + "SM lid: %d" % _sm_lid(port),
                    ind + "Capability mask: %s" % port.get("capability_mask", "0xa750e84a"),
                    ind + "Port GUID: %s" % _hexguid(dev["node_guid"]),
                    ind + "Link layer: %s" % port.get("link_layer", "InfiniBand")]
    _out("\n".join(out) + "\n" if out else "")
    return 0


def rdma(profile, argv):
    as_json = False
    args = list(argv)
    while args and args[0].startswith("-"):
        if args[0] in ("-j", "-json", "--json"):
            as_json = True
        elif args[0] in ("-p", "-pretty", "--pretty", "-d", "-details", "--details"):
            pass
        else:
            sys.stderr.write('Option "%s" is unknown, try "rdma -help".\n' % args[0])
            return 1
        args.pop(0)
    if not args or args[0] not in ("link", "l", "li", "lin"):
        sys.stderr.write("kimi-sim fake rdma: only `rdma [-j] link [show [DEV[/PORT]]]` is supported\n")
        return 1
    args = args[1:]
    if args and args[0] in ("show", "list", "sh", "s", "lst"):
        args = args[1:]
    sel_dev, sel_port = None, None
    if args:
        sel = args[0]
        if "/" in sel:
            sel_dev, p = sel.split("/", 1)
            sel_port = int(p)
        else:
            sel_dev = sel
    rows = []
    ords = _ordinals(profile)
    for name, dev in simcommon.rdma_devices(profile):
        if sel_dev and name != sel_dev:
            continue
        for pnum, port in _ports(dev):
            if sel_port is not None and pnum != sel_port:
                continue
            row = {"ifindex": ords[name], "ifname": name, "port": pnum,
                   "state": RDMA_STATE.get(port.get("state"), "DOWN"),
                   "physical_state": RDMA_PHYS.get(port.get("physical_state"), "DISABLED")}
            if dev.get("netdev"):
                row["netdev"] = dev["netdev"]
                row["netdev_index"] = 10 + ords[name]
            rows.append(row)
    if sel_dev and not rows:
        sys.stderr.write('Wrong device name\n')
        return 1
    if as_json:
        _out(json.dumps(rows, separators=(",", ":")) + "\n")
        return 0
    lines = []
    for r in rows:
        line = "link %s/%d state %s physical_state %s" % (r["ifname"], r["port"], r["state"], r["physical_state"])
        if "netdev" in r:
            line += " netdev %s" % r["netdev"]
        lines.append(line)
    _out("".join(l + "\n" for l in lines))
    return 0
