package detect

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// amdModel is a row of the AMD device-ID table.
type amdModel struct {
	name string
	gfx  string
}

// amdModels maps PCI device IDs (vendor 0x1002) to model and gfx target,
// from pci.ids and the ROCm GPU list. The gfx target read from the KFD
// topology wins over this table.
func amdModels() map[uint16]amdModel {
	return map[uint16]amdModel{
		0x738c: {"Instinct MI100", "gfx908"},
		0x738e: {"Instinct MI100", "gfx908"},
		0x7408: {"Instinct MI250X", "gfx90a"},
		0x740c: {"Instinct MI250X/MI250", "gfx90a"},
		0x740f: {"Instinct MI210", "gfx90a"},
		0x74a0: {"Instinct MI300A", "gfx942"},
		0x74a1: {"Instinct MI300X", "gfx942"},
		0x74a2: {"Instinct MI308X", "gfx942"},
		0x74a5: {"Instinct MI325X", "gfx942"},
		0x74a9: {"Instinct MI300X HF", "gfx942"},
		0x74b5: {"Instinct MI300X VF", "gfx942"},
		0x74b9: {"Instinct MI325X VF", "gfx942"},
		0x74bd: {"Instinct MI300X HF", "gfx942"},
		0x75a0: {"Instinct MI350X", "gfx950"},
		0x75a3: {"Instinct MI355X", "gfx950"},
		0x744c: {"Radeon RX 7900 XT/XTX", "gfx1100"},
	}
}

// aiterTargets are the gfx targets sglang's ROCm backends (aiter) support.
func aiterTargets() []string { return []string{"gfx90a", "gfx942", "gfx950"} }

// kfdNode is one node of sys/class/kfd/kfd/topology/nodes.
type kfdNode struct {
	id          int
	gfx         string // "" for CPU nodes
	domain      uint64
	locationID  uint64
	renderMinor uint64
}

// parseKFDProperties parses a KFD topology node's properties file
// ("name value" per line, decimal values). It fails on a malformed line.
func parseKFDProperties(b []byte) (map[string]uint64, error) {
	props := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"name value\", got %q", n, line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", n, f[0], err)
		}
		props[f[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading properties: %w", err)
	}
	return props, nil
}

// gfxName turns a KFD gfx_target_version (major*10000 + minor*100 +
// stepping) into a gfx target name: 90402 is "gfx942", 90010 "gfx90a",
// 110000 "gfx1100". Zero (a CPU node) gives "".
func gfxName(v uint64) string {
	if v == 0 {
		return ""
	}
	major, minor, step := v/10000, (v/100)%100, v%100
	return fmt.Sprintf("gfx%d%x%x", major, minor, step)
}

// readKFDNodes reads the GPU nodes of the KFD topology, sorted by node id,
// and the first parse error met.
func readKFDNodes(e *env) ([]kfdNode, error) {
	const dir = "sys/class/kfd/kfd/topology/nodes"
	entries, err := os.ReadDir(e.path(dir))
	if err != nil {
		return nil, nil
	}
	var nodes []kfdNode
	var firstErr error
	for _, ent := range entries {
		id, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		rel := dir + "/" + ent.Name() + "/properties"
		b, err := e.readFile(rel)
		if err != nil {
			continue
		}
		props, err := parseKFDProperties(b)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", disp(rel), err)
			}
			continue
		}
		gfx := gfxName(props["gfx_target_version"])
		if gfx == "" {
			continue // CPU node
		}
		nodes = append(nodes, kfdNode{
			id: id, gfx: gfx,
			domain: props["domain"], locationID: props["location_id"],
			renderMinor: props["drm_render_minor"],
		})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].id < nodes[j].id })
	return nodes, firstErr
}

// matchKFD pairs PCI devices with KFD nodes: by domain and location_id
// (bus<<8 | device<<3 | function) first, then the rest in order.
func matchKFD(pcis []pciDev, nodes []kfdNode) map[string]kfdNode {
	out := map[string]kfdNode{}
	used := make([]bool, len(nodes))
	for _, p := range pcis {
		dom, bus, dev, fn, ok := parsePCIAddress(p.addr)
		if !ok {
			continue
		}
		loc := bus<<8 | dev<<3 | fn
		for i, n := range nodes {
			if !used[i] && n.domain == dom && n.locationID == loc {
				out[p.addr], used[i] = n, true
				break
			}
		}
	}
	next := 0
	for _, p := range pcis {
		if _, ok := out[p.addr]; ok {
			continue
		}
		for next < len(nodes) && used[next] {
			next++
		}
		if next == len(nodes) {
			break
		}
		out[p.addr], used[next] = nodes[next], true
	}
	return out
}

// amdDevices builds the verdicts for AMD GPUs: amdgpu bound, /dev/kfd and
// the render node open, gfx target one of aiterTargets.
func amdDevices(e *env, pcis []pciDev) []Device {
	if len(pcis) == 0 {
		return nil
	}
	models := amdModels()
	nodes, nodesErr := readKFDNodes(e)
	match := matchKFD(pcis, nodes)
	drm := drmNodes(e)
	out := make([]Device, 0, len(pcis))
	for _, p := range pcis {
		d := Device{Vendor: VendorAMD, PCIAddress: p.addr, PCIID: p.id()}
		m, known := models[p.device]
		if known {
			d.Model, d.Arch = "AMD "+m.name, m.gfx
		} else {
			d.Model = fmt.Sprintf("AMD device 0x%04x", p.device)
		}
		node, hasNode := match[p.addr]
		if hasNode {
			d.Arch = node.gfx
		}
		d.Reason = func() string {
			if p.err != nil {
				return reason(CheckPresent, "%v", p.err)
			}
			if r := driverReason(p, "amdgpu"); r != "" {
				return r
			}
			if r := e.openRel("dev/kfd"); r != "" {
				return reason(CheckDeviceNode, "%s", r)
			}
			render := ""
			switch {
			case hasNode && node.renderMinor > 0:
				render = fmt.Sprintf("renderD%d", node.renderMinor)
			default:
				render = renderNodeOf(drm[p.addr])
			}
			if render == "" {
				return reason(CheckDeviceNode, "no render node known for %s (neither KFD drm_render_minor nor %s)", p.addr, disp("sys/class/drm"))
			}
			if r := e.openRel("dev/dri/" + render); r != "" {
				return reason(CheckDeviceNode, "%s", r)
			}
			if !hasNode {
				why := "no KFD topology node for " + p.addr
				if nodesErr != nil {
					why += ": " + nodesErr.Error()
				}
				return reason(CheckCapable, "gfx target unknown (%s)", why)
			}
			for _, t := range aiterTargets() {
				if node.gfx == t {
					return ""
				}
			}
			return reason(CheckCapable, "%s is not supported by aiter or sglang's ROCm builds (need %s); triton might run but is not offered",
				node.gfx, strings.Join(aiterTargets(), ", "))
		}()
		d.Usable = d.Reason == ""
		out = append(out, d)
	}
	return out
}
