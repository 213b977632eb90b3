// SNIPPET_HEAD
int main() {
// SNIPPET
}
