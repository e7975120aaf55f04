"""nvidia-smi in every format the `logs --nvidia-smi` option reads, as the tool prints them (driver 525 / 550 /
570 outputs, abbreviated where whole sections do not matter)."""
from __future__ import annotations

import pytest

from vram_detective.forensics.nvidia_smi import SmiInputError, parse_file, parse_nvidia_smi

TABLE_550 = """\
Tue Mar 11 10:21:07 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.120                Driver Version: 550.120        CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0  On |                  Off |
|  0%   38C    P8             21W /  450W |   10240MiB /  24564MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA GeForce RTX 4090        Off |   00000000:02:00.0 Off |                  Off |
|  0%   35C    P8             17W /  450W |       3MiB /  24564MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|    0   N/A  N/A      1873      G   /usr/lib/xorg/Xorg                            236MiB |
|    0   N/A  N/A     48213      C   python3                                     9988MiB |
+-----------------------------------------------------------------------------------------+
"""

TABLE_525 = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 525.85.12    Driver Version: 525.85.12    CUDA Version: 12.0     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  NVIDIA A100-SXM...  On   | 00000000:07:00.0 Off |                    0 |
| N/A   34C    P0    61W / 400W |  73421MiB / 81920MiB |      0%      Default |
|                               |                      |             Disabled |
+-------------------------------+----------------------+----------------------+

+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|    0   N/A  N/A     21714      C   ...envs/vllm/bin/python3        73418MiB |
+-----------------------------------------------------------------------------+
"""

CSV_UNITS = """\
index, name, memory.used [MiB], memory.total [MiB]
0, NVIDIA H100 80GB HBM3, 74143 MiB, 81559 MiB
1, NVIDIA H100 80GB HBM3, 73987 MiB, 81559 MiB
"""

CSV_NOUNITS = """\
index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]
0, NVIDIA L40S, 46068, 45241, 380
"""

CSV_NOHEADER = "10240 MiB, 24564 MiB\n"

CSV_APPS = """\
pid, process_name, used_gpu_memory [MiB]
48213, python3, 9988 MiB
"""

XML = """\
<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<timestamp>Tue Mar 11 10:21:07 2025</timestamp>
	<driver_version>570.124.06</driver_version>
	<cuda_version>12.8</cuda_version>
	<attached_gpus>1</attached_gpus>
	<gpu id="00000000:01:00.0">
		<product_name>NVIDIA GeForce RTX 4090</product_name>
		<product_brand>GeForce</product_brand>
		<product_architecture>Ada Lovelace</product_architecture>
		<persistence_mode>Disabled</persistence_mode>
		<minor_number>0</minor_number>
		<fb_memory_usage>
			<total>24564 MiB</total>
			<reserved>346 MiB</reserved>
			<used>10240 MiB</used>
			<free>13978 MiB</free>
		</fb_memory_usage>
		<bar1_memory_usage>
			<total>256 MiB</total>
			<used>2 MiB</used>
			<free>254 MiB</free>
		</bar1_memory_usage>
		<processes>
			<process_info>
				<gpu_instance_id>N/A</gpu_instance_id>
				<compute_instance_id>N/A</compute_instance_id>
				<pid>48213</pid>
				<type>C</type>
				<process_name>python3</process_name>
				<used_memory>9988 MiB</used_memory>
			</process_info>
			<process_info>
				<gpu_instance_id>N/A</gpu_instance_id>
				<compute_instance_id>N/A</compute_instance_id>
				<pid>1873</pid>
				<type>G</type>
				<process_name>/usr/lib/xorg/Xorg</process_name>
				<used_memory>236 MiB</used_memory>
			</process_info>
		</processes>
	</gpu>
</nvidia_smi_log>
"""

QUERY_TEXT = """\

==============NVSMI LOG==============

Timestamp                                 : Tue Mar 11 10:21:07 2025
Driver Version                            : 570.124.06
CUDA Version                              : 12.8

Attached GPUs                             : 1
GPU 00000000:01:00.0
    Product Name                          : NVIDIA GeForce RTX 4090
    Product Brand                         : GeForce
    Minor Number                          : 0
    FB Memory Usage
        Total                             : 24564 MiB
        Reserved                          : 346 MiB
        Used                              : 10240 MiB
        Free                              : 13978 MiB
    BAR1 Memory Usage
        Total                             : 256 MiB
        Used                              : 2 MiB
        Free                              : 254 MiB
    Processes
        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 48213
            Type                          : C
            Name                          : python3
            Used GPU Memory               : 9988 MiB
"""


def test_default_table_new_driver():
    reading = parse_nvidia_smi(TABLE_550)
    assert reading.format == "table" and reading.driver_version == "550.120" and reading.cuda_version == "12.4"
    assert [(g.index, g.name, g.used_mib, g.total_mib) for g in reading.gpus] == [
        (0, "NVIDIA GeForce RTX 4090", 10240, 24564), (1, "NVIDIA GeForce RTX 4090", 3, 24564)]
    assert [(p.gpu_index, p.pid, p.type, p.name, p.used_mib) for p in reading.processes] == [
        (0, 1873, "G", "/usr/lib/xorg/Xorg", 236), (0, 48213, "C", "python3", 9988)]


def test_default_table_old_driver_with_a_truncated_name():
    reading = parse_nvidia_smi(TABLE_525)
    gpu = reading.gpu(0)
    assert (gpu.name, gpu.used_mib, gpu.total_mib) == ("NVIDIA A100-SXM...", 73421, 81920)
    assert reading.processes[0].used_mib == 73418 and reading.processes[0].pid == 21714


def test_query_gpu_csv_with_and_without_units():
    reading = parse_nvidia_smi(CSV_UNITS)
    assert reading.format == "csv"
    assert [(g.index, g.used_mib, g.total_mib) for g in reading.gpus] == [(0, 74143, 81559), (1, 73987, 81559)]
    nounits = parse_nvidia_smi(CSV_NOUNITS).gpu(0)
    assert (nounits.name, nounits.used_mib, nounits.total_mib, nounits.free_mib) == ("NVIDIA L40S", 45241, 46068, 380)
    bare = parse_nvidia_smi(CSV_NOHEADER).gpu(0)
    assert (bare.used_mib, bare.total_mib) == (10240, 24564)
    apps = parse_nvidia_smi(CSV_APPS)
    assert [(p.pid, p.name, p.used_mib) for p in apps.processes] == [(48213, "python3", 9988)]


def test_query_xml():
    reading = parse_nvidia_smi(XML)
    assert reading.format == "xml" and reading.driver_version == "570.124.06"
    gpu = reading.gpu(0)
    assert (gpu.name, gpu.used_mib, gpu.total_mib, gpu.reserved_mib, gpu.free_mib, gpu.bus_id) == (
        "NVIDIA GeForce RTX 4090", 10240, 24564, 346, 13978, "00000000:01:00.0")
    assert [(p.pid, p.name, p.used_mib, p.type) for p in reading.processes] == [
        (48213, "python3", 9988, "C"), (1873, "/usr/lib/xorg/Xorg", 236, "G")]


def test_query_text():
    reading = parse_nvidia_smi(QUERY_TEXT)
    assert reading.format == "query-text"
    gpu = reading.gpu(0)
    assert (gpu.name, gpu.used_mib, gpu.total_mib, gpu.reserved_mib) == ("NVIDIA GeForce RTX 4090", 10240, 24564, 346)
    assert [(p.pid, p.name, p.used_mib) for p in reading.processes] == [(48213, "python3", 9988)]


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("hello world\n", "not nvidia-smi"),
    ("<?xml version='1.0'?><something/>", "not <nvidia_smi_log>"),
    ("<nvidia_smi_log><gpu>", "not valid"),
    ("0, 1024, 2048, 24564\n", "ambiguous"),
])
def test_bad_inputs_are_clear_errors(text, message):
    with pytest.raises(SmiInputError, match=message):
        parse_nvidia_smi(text)


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "smi.bin"
    path.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(SmiInputError, match="binary"):
        parse_file(str(path))
