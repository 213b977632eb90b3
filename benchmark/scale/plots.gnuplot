# Plots of the scale studies: gnuplot -e "dir='docs/results/scaling'" plots.gnuplot
set terminal pngcairo size 800,500 font ",11"
set grid
set key left top

set output dir."/nic.png"
set title "Shared NIC vs one NIC per GPU (16 servers x 8 GPUs, halving-doubling)"
set logscale xy
set xlabel "allreduce size (bytes)"
set ylabel "time (ms)"
plot dir."/nic.dat" using 1:2 with linespoints title "shared NIC", \
     dir."/nic.dat" using 1:3 with linespoints title "NIC per GPU"

set output dir."/topology.png"
set title "64 MiB allreduce: fat-tree with ECMP vs BiGraph with HDRM"
set xlabel "ranks"
plot dir."/topology.dat" using 1:($2 > 0 ? $2 : 1/0) with linespoints title "ring, fat-tree", \
     dir."/topology.dat" using 1:3 with linespoints title "halving-doubling, fat-tree", \
     dir."/topology.dat" using 1:4 with linespoints title "halving-doubling, BiGraph", \
     dir."/topology.dat" using 1:5 with linespoints title "HDRM, BiGraph"

set output dir."/gdraa.png"
set title "GDRAA vs ring vs halving-doubling, 64 KiB allreduce"
set xlabel "ranks"
plot dir."/gdraa.dat" using 1:($2 < 100000 ? $3 : 1/0) with linespoints title "GDRAA", \
     dir."/gdraa.dat" using 1:($2 < 100000 ? $4 : 1/0) with linespoints title "ring", \
     dir."/gdraa.dat" using 1:($2 < 100000 ? $5 : 1/0) with linespoints title "halving-doubling"

set output dir."/resnet.png"
set title "ResNet-50 scaling efficiency (simulated)"
unset logscale y
set yrange [0:1.05]
set ylabel "compute / iteration"
set key left bottom
plot dir."/resnet.dat" using 1:2 with linespoints title "ring, fat-tree, no overlap", \
     dir."/resnet.dat" using 1:3 with linespoints title "ring, fat-tree, overlap", \
     dir."/resnet.dat" using 1:4 with linespoints title "HDRM, BiGraph, no overlap", \
     dir."/resnet.dat" using 1:5 with linespoints title "HDRM, BiGraph, overlap"
