#!/usr/bin/env bash
# mkfixtures.sh regenerates the fixture trees under detect/testdata/.
#
# Each fixture is a miniature root directory (sys/, proc/, dev/) as the
# detector reads it. Device nodes are plain empty files. Symlinks are
# relative and stay inside the fixture.
#
# A ':' cannot appear in a Go module file path (golang.org/x/mod/module
# rejects it, so a module holding one could not be downloaded), so every
# ':' in a file name or symlink target is written as "%3A". The tests copy
# a fixture into a temporary directory and turn "%3A" back into ':'
# (see copyFixture in fixture_test.go).
#
# Usage: cd detect/testdata && ./mkfixtures.sh
set -euo pipefail
cd "$(dirname "$0")"

E() { printf '%s' "${1//:/%3A}"; }

# pci ADDR VENDOR DEVICE CLASS [DRIVER]
pci() {
	local d="sys/bus/pci/devices/$(E "$1")"
	mkdir -p "$d"
	printf '0x%s\n' "$2" >"$d/vendor"
	printf '0x%s\n' "$3" >"$d/device"
	printf '0x%s\n' "$4" >"$d/class"
	if [[ -n "${5:-}" ]]; then
		mkdir -p "sys/bus/pci/drivers/$5"
		: >"sys/bus/pci/drivers/$5/bind"
		ln -s "../../../../bus/pci/drivers/$5" "$d/driver"
	fi
}

# drm NAME ADDR : sys/class/drm/NAME/device -> the PCI device
drm() {
	mkdir -p "sys/class/drm/$1"
	ln -s "../../../bus/pci/devices/$(E "$2")" "sys/class/drm/$1/device"
}

node() { mkdir -p "$(dirname "$1")"; : >"$1"; }

# classdev ADDR CLASS NAME MAJOR:MINOR : a device node a driver made, as
# sysfs shows it under the PCI device (ADDR/CLASS/NAME/dev)
classdev() {
	local d="sys/bus/pci/devices/$(E "$1")/$2/$3"
	mkdir -p "$d"
	printf '%s\n' "$4" >"$d/dev"
}

nvidia_version() {
	mkdir -p proc/driver/nvidia
	cat >proc/driver/nvidia/version <<'V'
NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 02:05:29 UTC 2025
GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)
V
}

# nvidia_gpu ADDR MINOR MODEL
nvidia_gpu() {
	local d="proc/driver/nvidia/gpus/$(E "$1")"
	mkdir -p "$d"
	cat >"$d/information" <<I
Model: 		 $3
IRQ:   		 $((150 + $2))
GPU UUID: 	 GPU-00000000-0000-0000-0000-00000000000$2
Video BIOS: 	 96.00.af.00.01
Bus Type: 	 PCIe
DMA Size: 	 52 bits
DMA Mask: 	 0xfffffffffffff
Bus Location: 	 $1
Device Minor: 	 $2
GPU Excluded:	 No
I
	node "dev/nvidia$2"
}

nvidia_ctl() { node dev/nvidiactl; node dev/nvidia-uvm; }

cpu_spr() {
	mkdir -p proc
	cat >proc/cpuinfo <<'C'
processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 143
model name	: Intel(R) Xeon(R) Platinum 8480+
stepping	: 8
cpu MHz		: 2000.000
cache size	: 107520 KB
physical id	: 0
siblings	: 112
core id		: 0
cpu cores	: 56
fpu		: yes
fpu_exception	: yes
cpuid level	: 32
wp		: yes
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 cat_l2 cdp_l3 invpcid_single intel_ppin cdp_l2 ssbd mba ibrs ibpb stibp ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb intel_pt avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local split_lock_detect avx_vnni avx512_bf16 wbnoinvd dtherm ida arat pln pts hfi vnmi avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect cldemote movdiri movdir64b enqcmd fsrm md_clear serialize tsxldtrk pconfig arch_lbr ibt amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities
bugs		: spectre_v1 spectre_v2 spec_store_bypass swapgs eibrs_pbrsb
bogomips	: 4000.00
clflush size	: 64
cache_alignment	: 64
address sizes	: 46 bits physical, 57 bits virtual
power management:

processor	: 1
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8480+
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep lm avx512f amx_bf16 avx512_fp16 amx_tile amx_int8
C
}

cpu_icx() {
	mkdir -p proc
	cat >proc/cpuinfo <<'C'
processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 106
model name	: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
stepping	: 6
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch avx2 avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb intel_pt avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves wbnoinvd avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid fsrm md_clear pconfig flush_l1d arch_capabilities
bogomips	: 4000.00
address sizes	: 46 bits physical, 57 bits virtual
C
}

cpu_epyc() {
	mkdir -p proc
	cat >proc/cpuinfo <<'C'
processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC 9654 96-Core Processor
stepping	: 1
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good amd_lbr_v2 nopl nonstop_tsc cpuid extd_apicid aperfmperf rapl pni pclmulqdq monitor ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 invpcid_single hw_pstate ssbd mba perfmon_v2 ibrs ibpb stibp ibrs_enhanced vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local avx512_bf16 clzero irperf xsaveerptr rdpru wbnoinvd amd_ppin cppc arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold avic v_vmsave_vmload vgif x2avic v_spec_ctrl vnmi avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq la57 rdpid overflow_recov succor smca fsrm flush_l1d
bogomips	: 4792.80
address sizes	: 52 bits physical, 57 bits virtual
C
}

cpu_kunpeng() {
	mkdir -p proc
	cat >proc/cpuinfo <<'C'
processor	: 0
BogoMIPS	: 200.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma dcpop asimddp asimdfhm
CPU implementer	: 0x48
CPU architecture: 8
CPU variant	: 0x1
CPU part	: 0xd01
CPU revision	: 0
C
}

cpu_altra() {
	mkdir -p proc
	cat >proc/cpuinfo <<'C'
processor	: 0
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x3
CPU part	: 0xd0c
CPU revision	: 1

processor	: 1
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x3
CPU part	: 0xd0c
CPU revision	: 1
C
}

# kfd_node N PROPERTIES...
kfd_node() {
	local d="sys/class/kfd/kfd/topology/nodes/$1"
	mkdir -p "$d"
	shift
	printf '%s\n' "$@" >"$d/properties"
}

kfd_cpu_node() {
	kfd_node "$1" "cpu_cores_count 96" "simd_count 0" "mem_banks_count 1" "gfx_target_version 0" \
		"vendor_id 0" "device_id 0" "location_id 0" "domain 0" "drm_render_minor 0" "max_engine_clk_ccompute 3707"
}

# kfd_gpu_node N GFX_TARGET_VERSION DEVICE_ID LOCATION_ID RENDER_MINOR
kfd_gpu_node() {
	kfd_node "$1" "cpu_cores_count 0" "simd_count 1216" "mem_banks_count 1" "gfx_target_version $2" \
		"vendor_id 4098" "device_id $3" "location_id $4" "domain 0" "drm_render_minor $5" \
		"num_xcc 8" "max_engine_clk_fcompute 2100"
}

fixture() {
	rm -rf "$1"
	mkdir -p "$1"
	pushd "$1" >/dev/null
	"fx_$1"
	popd >/dev/null
}

# --- NVIDIA ---

fx_h100() {
	cpu_spr
	pci 0000:05:00.0 10de 22a3 068000 nvidia # NVSwitch: excluded
	pci 0000:18:00.0 10de 2330 030200 nvidia
	pci 0000:2a:00.0 10de 2330 030200 nvidia
	pci 0000:00:00.0 8086 09a2 060000 # host bridge: not a GPU
	nvidia_version
	nvidia_gpu 0000:18:00.0 0 "NVIDIA H100 80GB HBM3"
	nvidia_gpu 0000:2a:00.0 1 "NVIDIA H100 80GB HBM3"
	nvidia_ctl
}

fx_h200() {
	cpu_spr
	pci 0000:3b:00.0 10de 2335 030200 nvidia
	nvidia_version
	nvidia_gpu 0000:3b:00.0 0 "NVIDIA H200"
	nvidia_ctl
}

fx_b200() {
	cpu_spr
	pci 0000:1b:00.0 10de 2901 030200 nvidia
	pci 0000:43:00.0 10de 2901 030200 nvidia
	nvidia_version
	nvidia_gpu 0000:1b:00.0 0 "NVIDIA B200"
	nvidia_gpu 0000:43:00.0 1 "NVIDIA B200"
	nvidia_ctl
}

fx_a100() {
	cpu_epyc
	pci 0000:07:00.0 10de 20b2 030200 nvidia
	nvidia_version
	nvidia_gpu 0000:07:00.0 0 "NVIDIA A100-SXM4-80GB"
	nvidia_ctl
}

fx_rtx4090() {
	cpu_icx
	pci 0000:01:00.0 10de 2684 030000 nvidia
	pci 0000:01:00.1 10de 22ba 040300 snd_hda_intel # HDMI audio: excluded
	nvidia_version
	nvidia_gpu 0000:01:00.0 0 "NVIDIA GeForce RTX 4090"
	nvidia_ctl
}

fx_container_no_driver() {
	cpu_spr
	# sysfs shows the host's binding, but the container got no driver
	# files (/proc/driver/nvidia) and no device nodes.
	pci 0000:3b:00.0 10de 2330 030200 nvidia
}

fx_vfio() {
	cpu_spr
	pci 0000:3b:00.0 10de 2335 030200 vfio-pci
	pci 0000:5e:00.0 10de 2335 030200 # no driver bound
	nvidia_version
	nvidia_ctl
}

fx_nvidia_plus_igpu() {
	cpu_icx
	pci 0000:00:02.0 8086 3e92 030000 i915
	pci 0000:01:00.0 10de 2684 030000 nvidia
	pci 0000:01:00.1 10de 22ba 040300 snd_hda_intel
	drm card0 0000:00:02.0
	drm renderD128 0000:00:02.0
	drm card1 0000:01:00.0
	drm renderD129 0000:01:00.0
	node dev/dri/card0
	node dev/dri/renderD128
	node dev/dri/card1
	node dev/dri/renderD129
	nvidia_version
	nvidia_gpu 0000:01:00.0 0 "NVIDIA GeForce RTX 4090"
	nvidia_ctl
}

# --- AMD ---

fx_mi300x() {
	cpu_epyc
	pci 0000:05:00.0 1002 74a1 120000 amdgpu
	pci 0000:26:00.0 1002 74a1 120000 amdgpu
	kfd_cpu_node 0
	# location_id = bus<<8 | device<<3 | function
	kfd_gpu_node 1 90402 29857 $((0x05 << 8)) 128
	kfd_gpu_node 2 90402 29857 $((0x26 << 8)) 129
	drm card0 0000:05:00.0
	drm renderD128 0000:05:00.0
	drm card1 0000:26:00.0
	drm renderD129 0000:26:00.0
	node dev/kfd
	node dev/dri/card0
	node dev/dri/renderD128
	node dev/dri/card1
	node dev/dri/renderD129
}

fx_mi355x() {
	cpu_epyc
	pci 0000:75:00.0 1002 75a3 120000 amdgpu
	kfd_cpu_node 0
	kfd_gpu_node 1 90500 30115 $((0x75 << 8)) 128
	drm card0 0000:75:00.0
	drm renderD128 0000:75:00.0
	node dev/kfd
	node dev/dri/card0
	node dev/dri/renderD128
}

# --- Huawei Ascend ---

fx_ascend910b() {
	cpu_kunpeng
	pci 0000:c1:00.0 19e5 d802 120000 devdrv_device_driver
	pci 0000:81:00.0 19e5 d802 120000 devdrv_device_driver
	pci 0000:01:00.0 19e5 a222 020000 hinic3 # Huawei NIC: not an accelerator
	node dev/davinci0
	node dev/davinci1
	node dev/davinci_manager
	node dev/devmm_svm
	node dev/hisi_hdc
}

# --- Intel ---

fx_intel_max1550() {
	cpu_spr
	pci 0000:29:00.0 8086 0bd5 038000 i915
	drm card0 0000:29:00.0
	drm renderD128 0000:29:00.0
	node dev/dri/card0
	node dev/dri/renderD128
}

# --- CPU only ---

fx_spr_amx() {
	cpu_spr
	pci 0000:00:00.0 8086 09a2 060000
	pci 0000:03:00.0 1a03 2000 030000 ast # BMC VGA: not a vendor we serve on
}

fx_cpu_noamx() {
	cpu_icx
	pci 0000:00:00.0 8086 09a2 060000
}

fx_arm64() {
	cpu_altra
}

# --- Accelerators of no listed platform (acme: made-up vendor 0xacce) ---

fx_acme() {
	cpu_icx
	pci 0000:00:00.0 8086 09a2 060000
	pci 0000:03:00.0 1a03 2000 030000 ast # BMC VGA: not an accelerator
	pci 0000:41:00.0 acce 0001 120000 acme
	classdev 0000:41:00.0 accel accel0 261:0
	node dev/accel/accel0
	pci 0000:42:00.0 acce 0001 120000 vfio-pci # passed through to a VM
}

fx_acme_no_node() {
	cpu_icx
	pci 0000:41:00.0 acce 0001 120000 acme
	classdev 0000:41:00.0 accel accel0 261:0 # /dev/accel/accel0 missing
	pci 0000:61:00.0 1e52 0100 0b4000 # a co-processor without a driver
}

for f in h100 h200 b200 a100 rtx4090 container_no_driver vfio nvidia_plus_igpu \
	mi300x mi355x ascend910b intel_max1550 spr_amx cpu_noamx arm64 acme acme_no_node; do
	fixture "$f"
done
