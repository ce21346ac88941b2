/*
 * replay.c — runs a libFuzzer target over a corpus without libFuzzer, so
 * that `make test` replays every corpus file with an ordinary compiler (and
 * under the sanitizers in `make check`).
 *
 * usage: NAME_replay DIR|FILE...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		printf("not ok - cannot open %s\n", path);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
	size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
	fclose(f);
	LLVMFuzzerTestOneInput(buf, got);
	free(buf);
	printf("ok - replay %s\n", path);
	return 0;
}

int main(int argc, char **argv)
{
	int bad = 0, count = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			printf("not ok - no corpus at %s\n", argv[i]);
			bad++;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			bad += replay_file(argv[i]);
			count++;
			continue;
		}
		struct dirent **names;
		int n = scandir(argv[i], &names, NULL, alphasort);
		for (int j = 0; j < n; j++) {
			if (names[j]->d_name[0] != '.') {
				char path[4096];
				snprintf(path, sizeof path, "%s/%s", argv[i], names[j]->d_name);
				bad += replay_file(path);
				count++;
			}
			free(names[j]);
		}
		free(names);
	}
	if (count == 0) {
		printf("not ok - empty corpus\n");
		bad++;
	}
	return bad ? 1 : 0;
}
