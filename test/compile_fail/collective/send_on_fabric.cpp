// p2p runs on transport::inproc only for now: a send on another transport must say so in
// a sentence (fabric's is the next increment).
#include "mimatrix/collectives.hpp"
#include "mimatrix/transport/fabric.hpp"

void exchange(mimatrix::collectives<mimatrix::transport::fabric>& coll, float* data) {
  coll.send(data, 4, mimatrix::dtype::float32, 1).wait();
}

int main() { return 0; }
