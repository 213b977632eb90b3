// Nothing but the snippet's own includes: the snippet is the body of a function.
// SNIPPET_HEAD
void snippet() {
// SNIPPET
}
